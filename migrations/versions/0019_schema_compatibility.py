"""Which releases may run on this schema: `schema_compatibility`, for rolling back safely.

One row, rewritten after every migration run (`migrations/env.py`, `migrations/compatibility.py`):
the database's revision and the oldest revision whose code runs on it. A `turnflow migrate` of an
older release that meets a revision it does not know reads it: it goes on without migrating when
its own head is at or after that oldest revision, and refuses in one line otherwise. A new
table: nothing existing is locked.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import online

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    online.set_lock_timeout()
    op.create_table(
        "schema_compatibility",
        sa.Column("singleton", sa.Boolean, primary_key=True, server_default=sa.text("true")),
        sa.Column("revision", sa.Text, nullable=False),
        sa.Column("oldest_compatible", sa.Text, nullable=False),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.CheckConstraint("singleton", name="ck_schema_compatibility_singleton"),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_table("schema_compatibility")
