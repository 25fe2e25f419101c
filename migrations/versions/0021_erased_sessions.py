"""Erased conversations: a tombstone per erased session id, holding only the id's digest.

`turnflow erase` removes one customer's conversation everywhere it is kept (store/erasure.py).
Afterwards the inspector and replays say "erased" for that id instead of "no such
conversation"; to know it they keep the SHA-256 of the id and the time, never the id itself.

A new, empty table: no lock on any existing one.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import online

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    online.set_lock_timeout()
    if online.table_exists("erased_sessions"):  # a rerun
        return
    op.create_table(
        "erased_sessions",
        sa.Column("digest", sa.LargeBinary(), nullable=False),
        sa.Column(
            "erased_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.PrimaryKeyConstraint("digest", name="erased_sessions_pkey"),
    )


def downgrade() -> None:
    op.drop_table("erased_sessions")
