"""Dead letters kept in full: records the DLQ topic cannot carry whole, and outbox rows the
broker can never take.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0006"
# Chained after 0002 on this branch; when revisions in between land, this names the newest.
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dead_letters",
        sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
        # "topic:partition:offset" of an input record, or "outbox:<row id>": one row per source,
        # so keeping the same record again (a replay after a crash) finds the row it made.
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("key", sa.LargeBinary),
        sa.Column("value", sa.LargeBinary),
        sa.Column("headers", JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.UniqueConstraint("source", name="uq_dead_letters_source"),
    )


def downgrade() -> None:
    op.drop_table("dead_letters")
