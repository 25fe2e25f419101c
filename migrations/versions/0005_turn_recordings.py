"""Turn recordings: the engine's clock and the model's side of each turn, for replays.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from migrations import online

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    def columns() -> None:
        op.add_column(
            "turns", sa.Column("clock_at", sa.DateTime(timezone=True)), if_not_exists=True
        )
        op.add_column("turns", sa.Column("model_calls", JSONB), if_not_exists=True)

    online.with_lock_retries(columns, what="turns recording columns")
    # Time-range selection of conversations to replay.
    online.create_index("ix_turns_created_at", "turns", "(created_at)")
    # Pruning expired recordings reads only the rows that still hold one.
    online.create_index(
        "ix_turns_recorded", "turns", "(created_at)", where="model_calls IS NOT NULL"
    )


def downgrade() -> None:
    op.drop_index("ix_turns_recorded", table_name="turns")
    op.drop_index("ix_turns_created_at", table_name="turns")
    op.drop_column("turns", "model_calls")
    op.drop_column("turns", "clock_at")
