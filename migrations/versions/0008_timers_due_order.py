"""Timers: one index in the order the scheduler claims them (due time, session, key).

The claim takes the earliest due timers in (at, session_id, key) order, `LIMIT` a batch,
`FOR UPDATE SKIP LOCKED`. With an index on `at` alone, every timer sharing one due time had to
be sorted on each claim: 100,000 reminders set for the same minute cost 82 ms a claim (a sort
spilling to disk), a hundred claims to fire them all. In this index's order the claim reads its
batch and stops (1 ms). It replaces the index on `at`, whose lookups (the earliest due time)
it serves as well.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from migrations import online

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    online.create_index("ix_timers_due", "timers", "(at, session_id, key)")
    online.drop_index("ix_timers_at")


def downgrade() -> None:
    op.create_index("ix_timers_at", "timers", ["at"])
    op.drop_index("ix_timers_due", table_name="timers")
