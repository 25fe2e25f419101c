"""What the inspector's turn search adds to a turn: at most a quarter of the turn's own bytes
once its month has ended and its index is rebuilt; less than the whole-JSON trigram index it
replaced while the month is being written.

Three thousand turns of a typical shape (bench/turn_shape.py: a customer's message, two replies,
outcome lines, a model recording) are saved through the store; the search index's bytes are
measured against the turn log's other bytes (rows, their TOAST and every other index), after
a VACUUM has moved the GIN index's pending entries into the index proper. The index the search
had before (trigrams of the turn's whole JSON) is kept beside it on the same rows, grown the same
way, for comparison.
"""

from __future__ import annotations

import asyncpg

from bench.turn_shape import turn_request
from store import Store
from store.search_text import INDEXES

SESSIONS, TURNS = 1000, 3
_JSON_TEXT = (
    "(coalesce(input_id, '') || ' ' || CAST(input AS text) || ' ' "
    "|| coalesce(CAST(messages AS text), '') || ' ' "
    "|| coalesce(source_topic || ':' || CAST(source_partition AS text) || ':' "
    "|| CAST(source_offset AS text), ''))"
)
_INDEX_BYTES = """
    SELECT coalesce(sum(pg_relation_size(i.inhrelid)), 0) FROM pg_inherits AS i
    WHERE i.inhparent = to_regclass($1)
"""
_LOG_BYTES = """
    SELECT sum(pg_total_relation_size(i.inhrelid)) FROM pg_inherits AS i
    WHERE i.inhparent = 'turns'::regclass
"""


async def test_the_turn_search_index_costs_at_most_a_quarter_of_the_turn(
    store: Store, database_url: str
) -> None:
    connection = await asyncpg.connect(database_url)
    try:  # the index the search had before, on the partition these turns go to, grown alike
        await connection.execute(
            f"CREATE INDEX ix_size_json ON turns_p_history USING gin ({_JSON_TEXT} gin_trgm_ops)")
    finally:
        await connection.close()
    n = 0
    for version in range(1, TURNS + 1):
        for first in range(0, SESSIONS, 100):
            batch = []
            for s in range(first, first + 100):
                n += 1
                batch.append(turn_request(f"conv-{s}", version, n=n))
            results = await store.save_turns(batch)
            assert not [r for r in results if isinstance(r, Exception)]
    (words,) = [name for name, (table, _, _) in INDEXES.items() if table == "turns"]
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute("VACUUM turns")
        search = int(await connection.fetchval(_INDEX_BYTES, words))
        json_index = int(await connection.fetchval("SELECT pg_relation_size('ix_size_json')"))
        log = int(await connection.fetchval(_LOG_BYTES)) - search - json_index
        before = json_index
        await connection.execute("DROP INDEX ix_size_json")
        # A month that has ended: its index rebuilt once (store/partitions.compact_closed).
        await connection.execute("REINDEX INDEX turns_p_history_words")
        compact = int(await connection.fetchval(_INDEX_BYTES, words))
    finally:
        await connection.close()
    turns = SESSIONS * TURNS
    per_turn, grown, compacted, json_grown = (
        log / turns, search / turns, compact / turns, before / turns)
    print(f"turn {per_turn:.0f} B; word index {grown:.0f} B grown ({grown / per_turn:.0%}),"
          f" {compacted:.0f} B rebuilt ({compacted / per_turn:.0%}); whole-JSON trigram index"
          f" {json_grown:.0f} B grown ({json_grown / per_turn:.0%})")
    assert compacted <= per_turn / 4
    assert grown < json_grown
