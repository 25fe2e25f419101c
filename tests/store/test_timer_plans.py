"""Setting or deleting one timer reads one row, and claiming a batch reads only the batch,
however many timers are pending.

The statements that delete timers by (session id, key) once took their pairs as a JSON list;
PostgreSQL guesses such a list holds 100 pairs and, on a table of some thousands of timers,
hashed the whole table rather than probe the primary key 100 times. And a claim of timers
sharing one due time once sorted all of them. These tests seed many timers and count the rows
the executed plans read from `timers`, under the plan PostgreSQL builds for the values given
and under the generic plan of a prepared statement.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from store import Store, TimerEntry, timers
from store.direct import positional
from tests.store.plans import explain, rows_read

PENDING = 10_000


def _timer_rows_read(plan: dict[str, Any]) -> int:
    return rows_read(plan, {"timers"})


async def _explain(url: str, generic: bool, statement: Any, parameters: dict[str, Any]) -> Any:
    return await explain(url, positional(statement.text), parameters, generic=generic)


@pytest.fixture
async def pending(store: Store, database_url: str) -> int:
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute(
            "INSERT INTO timers (session_id, key, at) SELECT 's' || g, 'remind',"
            f" now() + (g || ' seconds')::interval FROM generate_series(1, {PENDING}) AS g;"
            " ANALYZE timers"
        )
    finally:
        await connection.close()
    return PENDING


@pytest.mark.parametrize("generic", [False, True], ids=["custom-plan", "generic-plan"])
async def test_moving_one_timer_reads_only_its_own_rows(
    pending: int, database_url: str, generic: bool
) -> None:
    at = datetime.now(UTC) + timedelta(days=1)
    entry = TimerEntry(key="remind-2", session_id="s17", at=at, replaces="remind")
    parameters = timers.upsert_parameters(*timers.fold([entry]))
    plan = await _explain(database_url, generic, timers.UPSERT, parameters)
    assert _timer_rows_read(plan) <= 1, json.dumps(plan)[:3000]


@pytest.mark.parametrize("generic", [False, True], ids=["custom-plan", "generic-plan"])
async def test_deleting_a_few_timers_reads_only_theirs(
    pending: int, database_url: str, generic: bool
) -> None:
    pairs = [(f"s{n}", "remind") for n in (3, 333, 3333)]
    plan = await _explain(database_url, generic, timers.DELETE, timers.pairs_parameters(pairs))
    assert _timer_rows_read(plan) <= len(pairs), json.dumps(plan)[:3000]


async def test_a_nul_in_a_key_is_kept_as_the_json_columns_keep_it(store: Store) -> None:
    """PostgreSQL text cannot hold U+0000: the key is stored with U+FFFD in its place, and the
    same key, NUL and all, finds it again."""
    at = datetime.now(UTC) + timedelta(hours=1)
    await store.upsert_timers([TimerEntry(key="k\x00", session_id="s\x00", at=at)])
    assert await store.timers_pending() == 1
    assert await store.delete_timers([("s\x00", "k\x00")]) == 1
    assert await store.timers_pending() == 0


async def test_claiming_a_batch_of_timers_due_at_one_instant_reads_only_the_batch(
    store: Store, database_url: str
) -> None:
    """20,000 reminders set for the same minute: a claim of 100 reads 100 rows in the claim's
    order from the index, rather than sorting all 20,000 on every claim."""
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute(
            "INSERT INTO timers (session_id, key, at) SELECT 's' || g, 'remind',"
            " date_trunc('minute', now()) - interval '1 minute'"
            " FROM generate_series(1, 20000) AS g; ANALYZE timers"
        )
    finally:
        await connection.close()
    for generic in (False, True):
        plan = await _explain(database_url, generic, timers.CLAIM_DUE, {"limit": 100})
        assert _timer_rows_read(plan) <= 101, json.dumps(plan)[:3000]
    async with store.claim_due(100) as claim:
        keys = [t.session_id for t in claim.timers]
    assert keys == sorted(f"s{g}" for g in range(1, 20001))[:100]
