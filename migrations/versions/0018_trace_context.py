"""The trace context that travels with outbox rows and timers, and each turn's trace id.

`outbox.traceparent` / `outbox.tracestate`: the W3C trace context of the turn that wrote the
row, so a row sent later (by the relay after a crash, or by the next turn of its session)
carries its own turn's context, not the sender's. `timers.traceparent` / `timers.tracestate`:
the context on the `outbound.schedule` record the timer came from (the turn that set it), which
the scheduler links its wake to. `turns.trace_id`: the trace of the turn, for the inspector.

All NULL when tracing is off and on rows written before this migration.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import online

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # One table per lock: a long transaction on one of them holds up only its own change.
    for table, names in (("outbox", ("traceparent", "tracestate")),
                         ("timers", ("traceparent", "tracestate")),
                         ("turns", ("trace_id",))):
        def columns(table: str = table, names: tuple[str, ...] = names) -> None:
            for name in names:
                op.add_column(table, sa.Column(name, sa.Text(), nullable=True),
                              if_not_exists=True)

        online.with_lock_retries(columns, what=f"{table} trace columns")


def downgrade() -> None:
    op.drop_column("turns", "trace_id")
    op.drop_column("timers", "tracestate")
    op.drop_column("timers", "traceparent")
    op.drop_column("outbox", "tracestate")
    op.drop_column("outbox", "traceparent")
