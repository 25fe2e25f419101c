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
        "history_versions": [None for _ in requests],
        "history_limit": HISTORY_LIMIT,
    }
    return await explain(url, LOAD, parameters, generic=generic)


def _log_rows_read(plan: dict[str, Any]) -> int:
    return rows_read(plan, LOG_TABLES)


async def _seed_beside_others(
    database_url: str, *statements: tuple[str, tuple[Any, ...]]
) -> None:
    """Run ``statements`` (SQL and arguments), then log 50 other conversations of 100 turns
    each and refresh the statistics, as autovacuum would."""
    connection = await asyncpg.connect(database_url)
    try:
        for sql, arguments in statements:
            await connection.execute(sql, *arguments)
        for n in range(50):
            await connection.execute(_SEED, f"other-{n}", n + 1, 100)
        await connection.execute("ANALYZE turns; ANALYZE turn_sources")
    finally:
        await connection.close()


@pytest.fixture
async def long_log(store: Store, database_url: str) -> str:
    """One conversation with 5,000 logged turns among 10,000, statistics fresh."""
    await _seed_beside_others(database_url, (_SEED, ("long", 0, 5000)))
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


_SEED_SILENT = """
INSERT INTO turns (session_id, version, input, messages, llm_calls, source_topic,
                   source_partition, source_offset)
SELECT $1, $2 + g, jsonb_build_object('wake', 'k' || g), '[]'::jsonb, 0, 'inbound.turns', $3, g
FROM generate_series(1, $4) AS g
"""


@pytest.fixture
async def quiet_tail(store: Store, database_url: str) -> str:
    """30 message turns, then 5,000 turns that neither held a message nor sent one (wakes
    that found nothing to say), beside 5,000 other turns; statistics fresh."""
    await _seed_beside_others(
        database_url,
        (_SEED, ("quiet", 0, 30)),
        (_SEED_SILENT, ("quiet", 30, 99, 5000)),
        ("INSERT INTO sessions (id, version, state) VALUES ('quiet', 5030, '{}'::jsonb)", ()),
    )
    return "quiet"


@pytest.mark.parametrize("generic", [False, True], ids=["custom-plan", "generic-plan"])
async def test_a_load_does_not_pass_over_the_silent_turns(
    quiet_tail: str, database_url: str, generic: bool
) -> None:
    """The history read goes straight to the turns that give entries (the old read passed over
    all 5,000 silent ones first)."""
    plan = await _explain(database_url, generic, [(quiet_tail, 10**9, "new-id")])
    assert _log_rows_read(plan) <= HISTORY_LIMIT, json.dumps(plan, indent=1)[:4000]


async def test_the_history_behind_silent_turns_is_the_last_messages(
    quiet_tail: str, store: Store
) -> None:
    loaded = await store.load(quiet_tail, history_limit=HISTORY_LIMIT)
    assert loaded.version == 5030
    assert [(e["role"], e["text"]) for e in loaded.history] == [
        (role, f"{word} {n}")
        for n in range(21, 31)
        for role, word in (("user", "oi"), ("assistant", "olá"))
    ]


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
