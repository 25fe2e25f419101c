"""The inspector, round two: dead letters with their words, every agent's fallbacks.

- `dead_lettered_sources` gains `message` (the customer's text, or the start of a value that is
not a JSON object), `input_id`, `record_key` and `detail` (the parser's or the failure's
content-free sentence), each bounded and escaped by the consumer (`consumer/turns/refused_words.py`).
  All are nullable: rows written before this revision have none of them.
- `ix_turns_fallback` is made again with the predicate `store/incidents.py` has now: a turn
  the host answered without the model (its own `fallback` line) is a fallback for every agent,
  not only for agents whose lifecycle settings bill it. The predicate is written out here so
  this revision does not change if that module does. Like 0014's, it reads the turn log once;
  on a large live table create it beforehand with CREATE INDEX CONCURRENTLY under another name
  and rename it.
- The inspector's search: the `pg_trgm` extension (in PostgreSQL's contrib, a trusted
  extension: the database's owner may create it) and a GIN trigram index on each table's
  searchable text (`store/search_text.py`, written out here as it is at this revision):
  `ix_turns_search`, `ix_sessions_search`, `ix_dead_lettered_sources_search`. Building the
  turns' index reads the whole turn log; on a large live table create it beforehand with
  CREATE INDEX CONCURRENTLY under the same name and definition (this revision then skips it).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

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
    for name in COLUMNS:
        op.add_column("dead_lettered_sources", sa.Column(name, sa.Text, nullable=True))
    _fallback_index(FALLBACK)
    op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    for name, (table, expression) in SEARCH.items():
        op.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON {table} USING gin ({expression} gin_trgm_ops)"
        )


def downgrade() -> None:
    for name in reversed(SEARCH):
        op.execute(f"DROP INDEX IF EXISTS {name}")
    # pg_trgm stays: other objects of the database may use it
    _fallback_index(FALLBACK_BEFORE)
    for name in reversed(COLUMNS):
        op.drop_column("dead_lettered_sources", name)
