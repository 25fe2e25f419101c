"""Model recordings leave the turn log's rows: their own table, `turn_recordings`.

A turn's recording (the model's side of it, for replays; engine/recording.py) may hold personal
data and is dropped after `MODEL_RECORDING_RETENTION_DAYS`. Kept in `turns.model_calls`, every
drop rewrote the turn's whole row (a new row version with all its JSON, its WAL and index
entries). Here it is its own row, keyed like the turn by (session_id, version): a save writes
it beside the turn, pruning deletes it and leaves the turn alone.

Expand, then contract: `turns.model_calls` stays. Rows written before this revision keep their
recording there, readers fall back to it and pruning still clears it (only those rows have
one); a later release drops the column once they are past their retention.

Online-safe: a new, empty table; nothing existing is rewritten or locked.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import online
from sqlalchemy.dialects import postgresql

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    online.set_lock_timeout()
    if online.table_exists("turn_recordings"):  # a rerun
        return
    op.create_table(
        "turn_recordings",
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model_calls", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "version", name="turn_recordings_pkey"),
    )
    op.create_index("ix_turn_recordings_created", "turn_recordings", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_turn_recordings_created", table_name="turn_recordings")
    op.drop_table("turn_recordings")
