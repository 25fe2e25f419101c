"""A load reads the same few turn-log rows for the 10th turn and the 10,000th.

The load statement asks, for each of the turn's source records and input ids, whether the turn
log already has it. Written as `EXISTS` beside an `OR`, PostgreSQL may answer that by hashing
every row of `turns` (or every turn of the conversation) once per load, because it guesses a
JSON list holds 100 entries: a cost that grows with the log forever. These tests seed a long
log and count the rows the executed plan reads from `turns` and `turn_sources`, under the plan
PostgreSQL builds for the values given and under the generic plan a prepared statement settles
on (the consumer's statements are prepared once per connection).
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from store import Store
from store.history import LOAD
from store.input_ids import stored_input_id
from tests.store.plans import explain, rows_read

HISTORY_LIMIT = 20
LOG_TABLES = {"turns", "turn_sources"}

_SEED = """
INSERT INTO turns (session_id, version, input, messages, llm_calls, source_topic,
                   source_partition, source_offset, input_id)
SELECT $1, g, jsonb_build_object('message', 'oi ' || g, 'id', 'm' || g),
       jsonb_build_array(jsonb_build_object('kind', 'ai', 'text', 'olá ' || g)),
       1, 'inbound.turns', $2, g, 'm' || g
FROM generate_series(1, $3) AS g
"""


async def _explain(url: str, generic: bool, requests: list[tuple[str, int, str]]) -> Any:
    """The executed plan of a load of ``requests`` (session id, source offset, input id)."""
    parameters = {
        "session_ids": [session for session, _, _ in requests],
        "sources": [
            json.dumps([{"topic": "inbound.turns", "part": 0, "off": offset}])
            for _, offset, _ in requests
        ],
        "input_ids": [json.dumps([stored_input_id(i)]) for _, _, i in requests],
        "history_limit": HISTORY_LIMIT,
    }
    return await explain(url, LOAD, parameters, generic=generic)


def _log_rows_read(plan: dict[str, Any]) -> int:
    return rows_read(plan, LOG_TABLES)


@pytest.fixture
async def long_log(store: Store, database_url: str) -> str:
    """One conversation with 5,000 logged turns among 10,000, statistics fresh."""
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute(_SEED, "long", 0, 5000)
        for n in range(50):
            await connection.execute(_SEED, f"other-{n}", n + 1, 100)
        await connection.execute("ANALYZE turns; ANALYZE turn_sources")
    finally:
        await connection.close()
    return "long"


@pytest.mark.parametrize("generic", [False, True], ids=["custom-plan", "generic-plan"])
async def test_a_load_reads_no_more_of_a_long_log_than_its_history(
    long_log: str, database_url: str, generic: bool
) -> None:
    plan = await _explain(database_url, generic, [(long_log, 10**9, "new-id")])
    # The history's last turns, and one index probe per source record and input id.
    assert _log_rows_read(plan) <= HISTORY_LIMIT, json.dumps(plan, indent=1)[:4000]


@pytest.mark.parametrize("generic", [False, True], ids=["custom-plan", "generic-plan"])
async def test_a_grouped_load_reads_each_conversation_s_history_only(
    long_log: str, database_url: str, generic: bool
) -> None:
    requests = [(long_log, 10**9, "new-id")] + [
        (f"other-{n}", 10**9 + n, f"new-{n}") for n in range(10)
    ]
    plan = await _explain(database_url, generic, requests)
    assert _log_rows_read(plan) <= HISTORY_LIMIT * len(requests), json.dumps(plan)[:4000]


async def test_the_probes_still_find_what_the_log_has(long_log: str, store: Store) -> None:
    """The same seeded log: a source record and an input id it holds are found."""
    from store import SourceRecord

    loaded = await store.load(
        long_log,
        history_limit=HISTORY_LIMIT,
        sources=(SourceRecord("inbound.turns", 0, 4321), SourceRecord("inbound.turns", 0, 10**9)),
        input_ids=("m17", "never"),
    )
    assert loaded.applied_sources == frozenset({SourceRecord("inbound.turns", 0, 4321)})
    assert loaded.duplicate_ids == frozenset({"m17"})
    assert not loaded.applied and not loaded.duplicate
