"""A per-minute count of each workspace's model turns, shared by every consumer.

- `workspace_model_minutes (workspace_id, minute, turns)`: one row per workspace per minute
  (by the database's clock) in which it ran turns; a plan's `PLAN_MODEL_TURNS_PER_MINUTE`
  takes one from it per turn with one statement that only increments under the limit
  (`store/model_budget.py`), so two consumers can never both take the last one. Rows older
  than an hour are deleted by the consumers as they go.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import online

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    online.set_lock_timeout()
    op.create_table(
        "workspace_model_minutes",
        sa.Column("workspace_id", sa.Text(), nullable=False),
        sa.Column("minute", sa.DateTime(timezone=True), nullable=False),
        sa.Column("turns", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("workspace_id", "minute", name="pk_workspace_model_minutes"),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_table("workspace_model_minutes")
