"""Outbox: an index on when rows were published, for deleting them after the retention.

The relay deletes rows published longer ago than `OUTBOX_RETENTION_DAYS`. Without an index on
`published_at` each pass would read the whole outbox, which holds every row published within
the retention.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from migrations import online

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    online.create_index(
        "ix_outbox_published", "outbox", "(published_at)", where="published_at IS NOT NULL"
    )


def downgrade() -> None:
    op.drop_index("ix_outbox_published", table_name="outbox")
