"""Indexes for reading conversations back: the inspector's list and conversation pages.

- `ix_sessions_updated (updated_at, id)`: the conversation list is a keyset page by last
  activity; without it every page sorted the whole sessions table.
- `ix_turns_handoff`, `ix_turns_fallback`, `ix_turns_error`, `ix_turns_gated`
  `(session_id, created_at)`, partial: each holds only the turns of one kind an incident list
  asks for (a hand-off to a person, a fallback, an error, a gated turn; `store/incidents.py`),
  so a list filtered by one of them reads those turns alone, however large the turn log, from
  the index only (its predicate is the query's). Most turns are none of these, so the indexes
  stay small and cost a save nothing for them.
- `ix_dead_lettered_sources_session (session_id, created_at)`: a conversation's dead-lettered
  inputs.

The predicates are written out here as `store/incidents.py` has them at this revision, so the
migration does not change if that module does.

Each index is built CONCURRENTLY (`migrations/online.py`): writes to `turns` go on while the
turn log is read; an index of the same name made beforehand is kept, an INVALID one rebuilt.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from migrations import online

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KINDS = {
    "handoff": """outcomes @> '[{"code": "handoff", "run_id": null}]'""",
    "fallback": """outcomes @> '[{"code": "billed", "detail": "not billed (fallback)"}]'""",
    "error": (
        """(outcomes @> '[{"code": "action-failed"}]' """
        """OR outcomes @> '[{"code": "deferred"}]' """
        """OR outcomes @> '[{"code": "billed", "detail": "not billed (error)"}]')"""
    ),
    "gated": """outcomes @> '[{"code": "gated"}]'""",
}


def upgrade() -> None:
    online.create_index("ix_sessions_updated", "sessions", "(updated_at, id)")
    for kind, predicate in KINDS.items():
        online.create_index(f"ix_turns_{kind}", "turns", "(session_id, created_at)", where=predicate)
    online.create_index(
        "ix_dead_lettered_sources_session", "dead_lettered_sources", "(session_id, created_at)"
    )


def downgrade() -> None:
    op.drop_index("ix_dead_lettered_sources_session", table_name="dead_lettered_sources")
    for kind in reversed(KINDS):
        op.drop_index(f"ix_turns_{kind}", table_name="turns")
    op.drop_index("ix_sessions_updated", table_name="sessions")
