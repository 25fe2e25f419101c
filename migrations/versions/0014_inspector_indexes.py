"""Indexes for reading conversations back: the inspector's list and conversation pages.

- `ix_sessions_updated (updated_at, id)`: the conversation list is a keyset page by last
  activity; without it every page sorted the whole sessions table.
- `ix_turns_incidents (session_id, created_at)`, partial: only the turns an incident list asks
  for (a hand-off to a person, a fallback, an error, a gated turn; `store/incidents.py`), so a
  list filtered by one of them reads those turns alone, however large the turn log. Most turns
  are none of these, so the index stays small and costs a save nothing for them.
- `ix_dead_lettered_sources_session (session_id, created_at)`: a conversation's dead-lettered
  inputs.

The predicate is written out here as `store/incidents.py` has it at this revision, so the
migration does not change if that module does.

Creating `ix_turns_incidents` reads the whole turn log once and holds writes to `turns` while it
does; on a large live table create it beforehand with CREATE INDEX CONCURRENTLY under the same
name and definition (this migration then finds it and skips it).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INCIDENT = (
    """(outcomes @> '[{"code": "handoff", "run_id": null}]' """
    """OR outcomes @> '[{"code": "billed", "detail": "not billed (fallback)"}]' """
    """OR (outcomes @> '[{"code": "action-failed"}]' OR outcomes @> '[{"code": "deferred"}]' """
    """OR outcomes @> '[{"code": "billed", "detail": "not billed (error)"}]') """
    """OR outcomes @> '[{"code": "gated"}]')"""
)


def upgrade() -> None:
    op.execute("CREATE INDEX IF NOT EXISTS ix_sessions_updated ON sessions (updated_at, id)")
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_turns_incidents ON turns (session_id, created_at) "
        f"WHERE {INCIDENT}"
    )
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_dead_lettered_sources_session "
        "ON dead_lettered_sources (session_id, created_at)"
    )


def downgrade() -> None:
    op.drop_index("ix_dead_lettered_sources_session", table_name="dead_lettered_sources")
    op.drop_index("ix_turns_incidents", table_name="turns")
    op.drop_index("ix_sessions_updated", table_name="sessions")
