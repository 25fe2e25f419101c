"""The inspector's turn search indexes a turn's words, not its whole JSON.

`ix_turns_search` (migration 0016) was a trigram index on the turn's input and messages as JSON
text: every key, timestamp, session id and run id, in trigrams, cost about as much as the turn
itself. `ix_turns_words` is a word index (`to_tsvector('simple', …)`) of what the search is for
(store/search_text.py `TURN_WORDS`, written out here as it is at this revision): the input id,
the source record, the customer's message, for other inputs the input without its session id,
the agent's texts and their keys; the first 2,000 characters of that. The search finds the
turns holding every word, then keeps those holding the text as typed.

Online: the turn log is partitioned (0023) and a partitioned index cannot be built
CONCURRENTLY, so the new index is made on the parent alone (ON ONLY: invalid, nothing built),
then CONCURRENTLY on each partition and attached to it, which makes it valid. The old index is
dropped last, under a short `lock_timeout`: the search has an index throughout.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

from migrations.online import lint_ignore

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WORDS = (
    "(to_tsvector('simple', left(coalesce(input_id, '') || ' ' || coalesce(source_topic || ':' "
    "|| CAST(source_partition AS text) || ':' || CAST(source_offset AS text), '') || ' ' "
    "|| CASE WHEN input ? 'message' OR input ? 'burst' THEN coalesce(input ->> 'message', '') "
    "|| ' ' || coalesce(CAST(jsonb_path_query_array(input, '$.burst[*].message') AS text), '') "
    "ELSE CAST(input - 'session_id' AS text) END || ' ' "
    "|| coalesce(CAST(jsonb_path_query_array(messages, '$[*].text') AS text), '') || ' ' "
    "|| coalesce(CAST(jsonb_path_query_array(messages, '$[*].key') AS text), ''), "
    "2000)))"
)

JSON_TEXT = (
    "(coalesce(input_id, '') || ' ' || CAST(input AS text) || ' ' "
    "|| coalesce(CAST(messages AS text), '') || ' ' "
    "|| coalesce(source_topic || ':' || CAST(source_partition AS text) || ':' "
    "|| CAST(source_offset AS text), ''))"
)


def _partitions() -> list[str]:
    if op.get_context().as_sql:  # offline (what squawk lints): the converted log's first part
        return ["turns_p_history"]
    return [str(r[0]) for r in op.get_bind().execute(text(
        "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'turns'::regclass ORDER BY c.relname"
    )).all()]


def _build(name: str, expression: str) -> None:
    """``name`` on the turn log: on the parent alone, then concurrently on each partition."""
    op.execute("SET LOCAL lock_timeout = '1s'")
    lint_ignore("require-concurrent-index-creation", "ON ONLY builds nothing (catalog only, "
                "under the lock_timeout); each partition's index is built CONCURRENTLY below")
    op.execute(f"CREATE INDEX IF NOT EXISTS {name} ON ONLY turns USING gin ({expression})")
    with op.get_context().autocommit_block():
        for partition in _partitions():
            child = f"{partition}_{name.removeprefix('ix_turns_')}"
            offline = bool(op.get_context().as_sql)
            valid = None if offline else op.get_bind().execute(text(
                f"SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('{child}')"
            )).scalar()
            if valid is False:  # an interrupted concurrent build
                op.execute(f"DROP INDEX CONCURRENTLY {child}")
            op.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {child} ON {partition}"
                       f" USING gin ({expression})")
            attached = None if offline else op.get_bind().execute(text(
                f"SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass('{child}')"
            )).scalar()
            if attached is None:
                op.execute(f"ALTER INDEX {name} ATTACH PARTITION {child}")


def _drop(name: str) -> None:
    op.execute("SET LOCAL lock_timeout = '1s'")
    lint_ignore("require-concurrent-index-deletion", "a partitioned index cannot be dropped "
                "CONCURRENTLY; the drop is catalog work under a 1 s lock_timeout")
    op.execute(f"DROP INDEX IF EXISTS {name}")


def upgrade() -> None:
    _build("ix_turns_words", WORDS)
    _drop("ix_turns_search")


def downgrade() -> None:
    _build("ix_turns_search", JSON_TEXT + " gin_trgm_ops")
    _drop("ix_turns_words")
