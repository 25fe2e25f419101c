"""The inspector, round two: dead letters with their words, every agent's fallbacks.

- `dead_lettered_sources` gains `message` (the customer's text, or the start of a value that is
not a JSON object), `input_id`, `record_key` and `detail` (the parser's or the failure's
content-free sentence), each bounded and escaped by the consumer (`consumer/turns/refused_words.py`).
  All are nullable: rows written before this revision have none of them.
- `ix_turns_fallback` is made again with the predicate `store/incidents.py` has now: a turn
  the host answered without the model (its own `fallback` line) is a fallback for every agent,
  not only for agents whose lifecycle settings bill it. The predicate is written out here so
  this revision does not change if that module does. It is built CONCURRENTLY as
  `ix_turns_fallback_next`, then the old one is dropped CONCURRENTLY and the new one renamed.
- The inspector's search: the `pg_trgm` extension (in PostgreSQL's contrib, a trusted
  extension: the database's owner may create it) and a GIN trigram index on each table's
  searchable text (`store/search_text.py`, written out here as it is at this revision):
  `ix_turns_search`, `ix_sessions_search`, `ix_dead_lettered_sources_search`, each built
  CONCURRENTLY (`migrations/online.py`): writes go on while the turn log is read.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import online

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("message", "input_id", "record_key", "detail")

FALLBACK_BEFORE = """outcomes @> '[{"code": "billed", "detail": "not billed (fallback)"}]'"""
FALLBACK = (
    """(outcomes @> '[{"code": "billed", "detail": "not billed (fallback)"}]' """
    """OR outcomes @> '[{"code": "fallback"}]')"""
)


def _fallback_index(predicate: str) -> None:
    op.execute("DROP INDEX IF EXISTS ix_turns_fallback")
    op.execute(
        f"CREATE INDEX ix_turns_fallback ON turns (session_id, created_at) WHERE {predicate}"
    )


SEARCH = {
    "ix_turns_search": (
        "turns",
        "(coalesce(input_id, '') || ' ' || CAST(input AS text) || ' ' "
        "|| coalesce(CAST(messages AS text), '') || ' ' "
        "|| coalesce(source_topic || ':' || CAST(source_partition AS text) || ':' "
        "|| CAST(source_offset AS text), ''))",
    ),
    "ix_sessions_search": ("sessions", "(coalesce(CAST(state -> 'data' AS text), ''))"),
    "ix_dead_lettered_sources_search": (
        "dead_lettered_sources",
        "(coalesce(message, '') || ' ' || coalesce(input_id, '') || ' ' "
        "|| coalesce(record_key, '') || ' ' || session_id || ' ' || source_topic || ':' "
        "|| CAST(source_partition AS text) || ':' || CAST(source_offset AS text))",
    ),
}


def upgrade() -> None:
    def columns() -> None:
        for name in COLUMNS:
            op.add_column(
                "dead_lettered_sources", sa.Column(name, sa.Text, nullable=True),
                if_not_exists=True,
            )

    online.with_lock_retries(columns, what="dead_lettered_sources columns")
    # The new predicate's index beside the old one, then swapped: no moment without one for
    # longer than the drop, and writes to turns go on throughout.
    online.create_index(
        "ix_turns_fallback_next", "turns", "(session_id, created_at)", where=FALLBACK
    )
    online.drop_index("ix_turns_fallback")
    def rename() -> None:
        online.lint_ignore(
            "renaming-object", "the new index takes the old one's name; no query names indexes"
        )
        op.execute("ALTER INDEX ix_turns_fallback_next RENAME TO ix_turns_fallback")

    online.with_lock_retries(rename, what="ix_turns_fallback rename")
    op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    for name, (table, expression) in SEARCH.items():
        online.create_index(name, table, f"({expression} gin_trgm_ops)", using="gin")


def downgrade() -> None:
    for name in reversed(SEARCH):
        op.execute(f"DROP INDEX IF EXISTS {name}")
    # pg_trgm stays: other objects of the database may use it
    _fallback_index(FALLBACK_BEFORE)
    for name in reversed(COLUMNS):
        op.drop_column("dead_lettered_sources", name)
