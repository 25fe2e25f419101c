"""The turn log partitioned by month: saves land in their month, uniqueness holds across months,
hot reads touch only the partitions they need, and retention drops months whole."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from store import (
    AlreadyApplied,
    DuplicateInput,
    SourceRecord,
    Store,
    TimerEntry,
    migrate,
    partitions,
)
from store.history import LOAD
from store.input_ids import stored_input_id
from tests.store.builders import save_request
from tests.store.plans import explain, nodes, table_of

HISTORY_LIMIT = 20


async def _save(store: Store, session_id: str, version: int, at: datetime, **extra: Any) -> None:
    request = save_request(session_id, version - 1, replies=[f"{session_id} {version}"],
                           **extra)
    await store.save_turn(replace(request, turn=replace(request.turn, created_at=at)))


async def _fetch(url: str, sql: str, *args: Any) -> list[Any]:
    connection = await asyncpg.connect(url)
    try:
        return list(await connection.fetch(sql, *args))
    finally:
        await connection.close()


def _later(months: int) -> datetime:
    """The middle of the month ``months`` after this one."""
    return partitions.month_start(datetime.now(UTC), months) + timedelta(days=14)


async def test_a_turn_lands_in_its_month_and_uniqueness_holds_across_months(
    store: Store, database_url: str
) -> None:
    """Two months apart, the same source record or input id is still refused: the save checks
    the whole log, not one partition's index."""
    await store.ensure_turn_partitions(months=4)
    a, b = _later(2), _later(3)
    source = SourceRecord("inbound.turns", 0, 7)
    await _save(store, "s1", 1, a, source=source, input_id="m1")
    with pytest.raises(AlreadyApplied):
        await _save(store, "s1", 2, b, source=source)
    with pytest.raises(DuplicateInput):
        await _save(store, "s1", 2, b, input_id="m1")
    with pytest.raises(AlreadyApplied):  # another session cannot take the record either
        await _save(store, "s2", 1, b, source=source)
    first = save_request("s1", 1, input_id="m1")
    other = save_request("s3", 0, source=SourceRecord("inbound.turns", 0, 8))
    results = await store.save_turns([
        replace(first, turn=replace(first.turn, created_at=b)),
        replace(other, turn=replace(other.turn, created_at=b)),
    ])
    assert isinstance(results[0], DuplicateInput) and not isinstance(results[1], Exception)
    await _save(store, "s1", 2, b)
    rows = await _fetch(database_url, "SELECT session_id, version, tableoid::regclass::text AS p"
                        " FROM turns ORDER BY session_id, version")
    assert [(r["session_id"], r["version"], r["p"]) for r in rows] == [
        ("s1", 1, partitions.partition_name(partitions.month_start(a))),
        ("s1", 2, partitions.partition_name(partitions.month_start(b))),
        ("s3", 1, partitions.partition_name(partitions.month_start(b))),
    ]


async def test_many_conversations_saved_at_once_across_months_keep_their_own_turns(
    store: Store, database_url: str
) -> None:
    await store.ensure_turn_partitions(months=4)
    months = [_later(n) for n in (2, 3, 4)]

    async def conversation(n: int) -> None:
        for version, at in enumerate(months, start=1):
            await _save(store, f"c{n}", version, at + timedelta(minutes=n),
                        source=SourceRecord("inbound.turns", n % 3, n * 10 + version))

    await asyncio.gather(*(conversation(n) for n in range(30)))
    for n in (0, 17, 29):
        turns = await store.logged_turns([f"c{n}"])
        assert [t.messages[0]["text"] for t in turns] == [f"c{n} {v}" for v in (1, 2, 3)]
        loaded = await store.load(f"c{n}", history_limit=HISTORY_LIMIT)
        assert [e["text"] for e in loaded.history if e["role"] == "assistant"] == [
            f"c{n} {v}" for v in (1, 2, 3)]


def _scanned(plan: dict[str, Any]) -> set[str]:
    """The turn-log partitions the executed plan read (a scan that ran at least once)."""
    return {
        node["Relation Name"] for node in nodes(plan)
        if table_of(node.get("Relation Name")) == "turns"
        and node.get("Actual Loops", 0) > 0 and node["Node Type"] != "ModifyTable"
    }


@pytest.mark.parametrize("generic", [False, True], ids=["custom-plan", "generic-plan"])
async def test_the_history_read_skips_the_months_before_the_conversation(
    store: Store, database_url: str, generic: bool
) -> None:
    """A conversation begun two months from now: its load's history read scans only the
    partitions from that month on, under the plan for the values and the generic plan."""
    await store.ensure_turn_partitions(months=4)
    begun = _later(2)
    for n in range(3):
        await _save(store, f"old{n}", 1, datetime.now(UTC))
    for version in (1, 2, 3):
        await _save(store, "late", version, begun + timedelta(days=version * 10))
    parameters = {
        "session_ids": ["late"],
        "sources": [json.dumps([{"topic": "inbound.turns", "part": 0, "off": 10**9}])],
        "input_ids": [json.dumps([stored_input_id("new")])],
        "history_versions": [None],
        "history_limit": HISTORY_LIMIT,
    }
    plan = await explain(database_url, LOAD, parameters, generic=generic)
    # The history read's scans: the only turn-log scans bounded by created_at.
    history = [n for n in nodes(plan) if table_of(n.get("Relation Name")) == "turns"
               and "created_at" in str(n.get("Filter", "")) + str(n.get("Index Cond", ""))]
    read = {n["Relation Name"] for n in history if n.get("Actual Loops", 0) > 0}
    before = {p.name for p in await partitions.partitions(store.engine)
              if p.end is not None and p.end <= partitions.month_start(begun)}
    assert read and not read & before, json.dumps(plan)[:3000]
    assert "turns_p_history" in before


async def _plan(store: Store, statement: Any, parameters: dict[str, Any], *,
                no_seqscan: bool = False) -> Any:
    from sqlalchemy import text

    async with store.engine.connect() as connection:
        if no_seqscan:
            await connection.execute(text("SET enable_seqscan = off"))
        result = await connection.execute(
            text("EXPLAIN (ANALYZE, FORMAT JSON) " + statement.text), parameters)
        raw = result.scalar_one()
    return (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]


async def test_the_inspector_pages_and_searches_through_indexes(
    store: Store, database_url: str
) -> None:
    """A conversation page reads none of the months before the conversation began, and reads
    the others by index; a search reads every month through its search index, never a whole
    partition."""
    from consumer.inspect.reading import PAGE_TURNS, SEARCH_TURNS, Reader

    await store.ensure_turn_partitions(months=4)
    for n in range(40):
        await _save(store, f"o{n}", 1, datetime.now(UTC))
    begun = _later(3)
    for version in (1, 2):
        await _save(store, "later", version, begun + timedelta(hours=version))
    # Others' turns in the months with turns, so reading one through has a cost.
    for at in (datetime.now(UTC) - timedelta(hours=1), _later(3), _later(4)):
        await _admin(database_url, f"""
            INSERT INTO turns (session_id, version, input, messages, created_at)
            SELECT 'other-' || g, 1, jsonb_build_object('message', 'oi ' || g), '[]'::jsonb,
                   '{at.isoformat()}'::timestamptz + g * interval '1 second'
            FROM generate_series(1, 3000) AS g""")
    await _admin(database_url, "ANALYZE turns")
    reader = Reader(database_url, pool_size=1)
    try:
        page = await reader.conversation("later")
        assert page is not None and [t["version"] for t in page.turns] == [1, 2]
        found = await reader.search("later 2")
        assert [t["session_id"] for t in found.turns] == ["later"]
    finally:
        await reader.close()
    page_plan = await _plan(store, PAGE_TURNS, {"s": "later", "lo": 1, "hi": 2, "since": begun})
    before = {p.name for p in await partitions.partitions(store.engine)
              if p.end is not None and p.end <= partitions.month_start(begun)}
    scanned = _scanned(page_plan)
    assert "turns_p_history" in before and scanned and not scanned & before, \
        json.dumps(page_plan)[:3000]
    read = [n for n in nodes(page_plan) if table_of(n.get("Relation Name")) == "turns"]
    # No partition is read through: a sequential scan only of an empty one.
    assert read and all(
        n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0) == 0
        for n in read if n["Node Type"] == "Seq Scan"
    ), json.dumps(page_plan)[:3000]
    # The search: every month has an index on the searched words (a few thousand rows are read
    # through faster, so the planner is asked to use indexes where it can; it could not for a
    # partition without one).
    search_plan = await _plan(store, SEARCH_TURNS, {"p": "%later 2%", "q": "later 2", "n": 50},
                              no_seqscan=True)
    read = [n for n in nodes(search_plan) if table_of(n.get("Relation Name")) == "turns"]
    assert read and all(n["Node Type"] != "Seq Scan" for n in read), json.dumps(search_plan)[:3000]


# -- retention: a scratch database whose log has months in the past -----------------------------


@pytest.fixture
def scratch_url(database_url: str) -> Iterator[str]:
    name = f"turnflow_p_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(database_url, f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(database_url).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(_admin(database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def _admin(url: str, sql: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


@pytest.fixture
async def aged(scratch_url: str) -> AsyncIterator[Store]:
    """A migrated database whose log has a partition for each of the last four months."""
    await migrate.upgrade_async(scratch_url)
    await _admin(scratch_url, "DROP TABLE turns_p_history")
    store = await Store.connect(scratch_url, pool_size=2)
    now = datetime.now(UTC)
    for ago in (4, 3, 2, 1):
        start = partitions.month_start(now, -ago)
        await partitions._attach(store.engine, partitions.partition_name(start), start,
                                 partitions.month_start(now, -ago + 1))
    try:
        yield store
    finally:
        await store.close()


async def test_retention_drops_whole_months_and_what_is_left_of_them(
    aged: Store, scratch_url: str
) -> None:
    """Months wholly older than the retention go with one DROP each (no row deleted in the
    months kept); a conversation whose every turn went, with nothing in progress, goes too; one
    with a timer set or a reply unsent stays."""
    now = datetime.now(UTC)
    await aged.ensure_turn_partitions()
    old, recent = now - timedelta(days=100), now - timedelta(days=2)
    await _save(aged, "gone", 1, old)
    await _save(aged, "waiting", 1, old)
    await aged.upsert_timers([TimerEntry(key="k", session_id="waiting", at=now + timedelta(1))])
    await _save(aged, "both", 1, old)
    await _save(aged, "both", 2, recent)
    await _save(aged, "fresh", 1, recent)
    await _admin(scratch_url, f"UPDATE sessions SET updated_at = '{old.isoformat()}'"
                 " WHERE id IN ('gone', 'waiting', 'unsent')")
    await _admin(scratch_url, "UPDATE outbox SET published_at = now()")
    await _save(aged, "unsent", 1, old)  # its reply still unpublished
    await _admin(scratch_url, f"UPDATE sessions SET updated_at = '{old.isoformat()}'"
                 " WHERE id = 'unsent'")
    retention = timedelta(days=45)
    expired = {p.name for p in await partitions.partitions(aged.engine)
               if p.end is not None and p.end <= now - retention}
    assert expired, "the fixture made months older than the retention"

    dropped = await aged.drop_expired_turns(older_than=retention)

    assert set(dropped.partitions) == expired and dropped.default_rows == 0
    assert dropped.sessions == 1
    left = {p.name for p in await partitions.partitions(aged.engine)}
    assert not left & expired
    sessions = [r["id"] for r in await _fetch(scratch_url, "SELECT id FROM sessions ORDER BY id")]
    assert sessions == ["both", "fresh", "unsent", "waiting"]
    turns = await _fetch(scratch_url, "SELECT session_id, version FROM turns ORDER BY 1, 2")
    assert [(r["session_id"], r["version"]) for r in turns] == [("both", 2), ("fresh", 1)]
    deleted = await _fetch(scratch_url, "SELECT coalesce(sum(n_tup_del), 0) AS n"
                           " FROM pg_stat_user_tables WHERE relname LIKE 'turns_p%'")
    assert deleted[0]["n"] == 0
    again = await aged.drop_expired_turns(older_than=retention)
    assert again.partitions == [] and again.sessions == 0


async def test_partitions_are_made_ahead_once(aged: Store) -> None:
    made = await aged.ensure_turn_partitions(months=3)
    now = datetime.now(UTC)
    expected = {partitions.partition_name(partitions.month_start(now, n)) for n in range(4)}
    assert expected - {p.name for p in await partitions.partitions(aged.engine)} == set()
    assert set(made) <= expected
    assert await aged.ensure_turn_partitions(months=3) == []


async def test_an_ended_month_s_search_index_is_rebuilt_once(aged: Store) -> None:
    """The months that have ended get their search index rebuilt (smaller, the same rows
    found); the current month's is left to grow; a second pass rebuilds nothing."""
    from consumer.inspect.reading import Reader

    now = datetime.now(UTC)
    last_month = partitions.month_start(now, -1) + timedelta(days=3)
    for n in range(200):
        await _save(aged, f"m{n}", 1, last_month + timedelta(minutes=n))
    done = await aged.compact_turn_search()
    ended = {p.name for p in await partitions.partitions(aged.engine)
             if p.end is not None and p.end <= now}
    assert done and all(any(name.startswith(p) for p in ended) for name in done), (done, ended)
    assert await aged.compact_turn_search() == []
    url = aged.engine.url.render_as_string(hide_password=False)
    reader = Reader(url, pool_size=1)
    try:
        found = await reader.search("m17 2")
    finally:
        await reader.close()
    assert [t["session_id"] for t in found.turns] == []
    reader = Reader(url, pool_size=1)
    try:
        found = await reader.search("m17 1")
    finally:
        await reader.close()
    assert [t["session_id"] for t in found.turns] == ["m17"]


# -- partitions by day -----------------------------------------------------------------------


def _covering(parts: list[partitions.Partition], start: datetime, end: datetime) -> None:
    """No two partitions overlap, and every instant of [start, end) has one."""
    spans = sorted((p.start or datetime.min.replace(tzinfo=UTC),
                    p.end or datetime.max.replace(tzinfo=UTC), p.name)
                   for p in parts if not p.default)
    for (_, upper, a), (lower, _, b) in itertools.pairwise(spans):
        assert upper <= lower, f"{a} and {b} overlap"
    at = start
    for lower, upper, name in spans:
        if upper <= at:
            continue
        assert lower <= at, f"nothing covers {at} (next: {name} from {lower})"
        at = upper
        if at >= end:
            return
    raise AssertionError(f"nothing covers {at}")


async def test_a_change_to_days_and_back_leaves_no_gap_and_keeps_what_holds_turns(
    aged: Store, scratch_url: str
) -> None:
    """Days: the months made ahead and still empty are made again as days from the next month
    on (the current month keeps its partition); back to months, the days not yet started and
    empty go, the one holding a turn stays, and the rest of its month gets a partition."""
    now = datetime.now(UTC)
    await aged.ensure_turn_partitions(months=2)
    next_month = partitions.month_start(now, 1)
    horizon = (next_month - partitions.day_start(now)).days + 5  # five days into next month
    made = await partitions.ensure_ahead(aged.engine, unit="day", ahead=horizon)
    parts = await partitions.partitions(aged.engine)
    _covering(parts, partitions.month_start(now), partitions.day_start(now, horizon + 1))
    days = {partitions.partition_name(partitions.day_start(next_month, n), "day")
            for n in range(5)}
    assert days <= set(made) and days <= {p.name for p in parts}
    assert partitions.partition_name(next_month) not in {p.name for p in parts}
    assert partitions.partition_name(partitions.month_start(now)) in {p.name for p in parts}
    assert await partitions.ensure_ahead(aged.engine, unit="day", ahead=horizon) == []

    second = next_month + timedelta(days=1, hours=3)
    await _save(aged, "daily", 1, second)
    rows = await _fetch(scratch_url, "SELECT tableoid::regclass::text AS p FROM turns")
    assert [r["p"] for r in rows] == [partitions.partition_name(
        partitions.day_start(second), "day")]

    await aged.ensure_turn_partitions(unit="month", months=3)
    parts = await partitions.partitions(aged.engine)
    names = {p.name for p in parts}
    _covering(parts, partitions.month_start(now), partitions.month_start(now, 4))
    assert partitions.partition_name(partitions.day_start(second), "day") in names  # holds a turn
    rest = [p for p in parts if p.start is not None and p.end is not None
            and p.start <= next_month + timedelta(days=3) < p.end]
    assert len(rest) == 1 and rest[0].end == partitions.month_start(now, 2), rest  # one, not days
    assert partitions.partition_name(partitions.month_start(now, 2)) in names


async def test_retention_drops_whole_days(scratch_url: str) -> None:
    """A log by day: the days wholly past the retention are dropped one `DROP TABLE` each; the
    turns of the days kept stay, and so do the conversations that have one."""
    await migrate.upgrade_async(scratch_url)
    await _admin(scratch_url, "DROP TABLE turns_p_history")
    store = await Store.connect(scratch_url, pool_size=2)
    try:
        for p in await partitions.partitions(store.engine):
            if not p.default:
                await _admin(scratch_url, f"DROP TABLE {p.name}")
        now = datetime.now(UTC)
        for ago in range(10, 0, -1):
            start = partitions.day_start(now, -ago)
            await partitions._attach(store.engine, partitions.partition_name(start, "day"),
                                     start, partitions.day_start(now, -ago + 1))
        await store.ensure_turn_partitions(unit="day")
        for n in range(40):  # conversations spread over the last ten days
            await _save(store, f"c{n}", 1, now - timedelta(days=n % 10, hours=1))
        await _admin(scratch_url, "UPDATE outbox SET published_at = now()")
        await _admin(scratch_url, "UPDATE sessions SET updated_at = t.created_at FROM turns AS t"
                     " WHERE t.session_id = sessions.id")

        dropped = await store.drop_expired_turns(older_than=timedelta(days=5))

        expected = {partitions.partition_name(partitions.day_start(now, -ago), "day")
                    for ago in range(10, 5, -1)}
        assert set(dropped.partitions) == expected and dropped.default_rows == 0
        kept = await _fetch(scratch_url, "SELECT session_id, created_at FROM turns")
        assert kept and all(r["created_at"] >= partitions.day_start(now, -5) for r in kept)
        gone = {f"c{n}" for n in range(40)} - {r["session_id"] for r in kept}
        sessions = {r["id"] for r in await _fetch(scratch_url, "SELECT id FROM sessions")}
        assert sessions == {r["session_id"] for r in kept} and not gone & sessions
    finally:
        await store.close()


def test_a_partition_unit_other_than_a_month_or_a_day_is_refused() -> None:
    with pytest.raises(ValueError, match="a month or a day"):
        asyncio.run(partitions.ensure_ahead(None, unit="week"))  # type: ignore[arg-type]
