"""The save transaction: optimistic versions, atomicity, replay dedupe."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from store import (
    AlreadyApplied,
    OutboxEntry,
    SaveRequest,
    SourceRecord,
    Store,
    TurnRecord,
    VersionConflict,
)
from tests.store.builders import save_request


async def _count(database_url: str, sql: str, *args: object) -> int:
    connection = await asyncpg.connect(database_url)
    try:
        return int(await connection.fetchval(sql, *args))
    finally:
        await connection.close()


async def _turns(database_url: str, session_id: str) -> int:
    sql = "SELECT count(*) FROM turns WHERE session_id = $1"
    return await _count(database_url, sql, session_id)


async def _outbox(database_url: str, session_id: str) -> int:
    sql = "SELECT count(*) FROM outbox WHERE session_id = $1"
    return await _count(database_url, sql, session_id)


async def test_save_writes_turn_and_outbox_rows_in_order(store: Store, database_url: str) -> None:
    """A save returns the new version and the outbox ids in write order."""
    saved = await store.save_turn(save_request("s1", 0, outbox=3))
    assert saved.version == 1
    assert saved.outbox_ids == sorted(saved.outbox_ids) and len(saved.outbox_ids) == 3
    async with store.fetch_unpublished(session_id="s1") as batch:
        assert [row.payload["n"] for row in batch.rows] == [0, 1, 2]
    assert await _turns(database_url, "s1") == 1


async def test_stale_version_conflicts_and_writes_nothing(store: Store, database_url: str) -> None:
    """Saving from an old version raises VersionConflict with both versions; nothing changes."""
    await store.save_turn(save_request("s1", 0, state={"n": 1}))
    await store.save_turn(save_request("s1", 1, state={"n": 2}))
    with pytest.raises(VersionConflict) as raised:
        await store.save_turn(save_request("s1", 1, state={"n": "stale"}, outbox=2))
    conflict = raised.value
    assert (conflict.session_id, conflict.expected, conflict.found) == ("s1", 1, 2)
    assert (await store.load("s1")).state == {"n": 2}
    assert await _turns(database_url, "s1") == 2
    assert await _outbox(database_url, "s1") == 2


async def test_saving_a_missing_session_at_a_version_conflicts(store: Store) -> None:
    """A save expecting version 3 of a session that does not exist is a conflict, not a create."""
    with pytest.raises(VersionConflict) as raised:
        await store.save_turn(save_request("ghost", 3))
    assert raised.value.found is None
    assert (await store.load("ghost")).version == 0


async def test_creating_an_existing_session_conflicts(store: Store) -> None:
    """A second save at version 0 finds the session already created."""
    await store.save_turn(save_request("s1", 0))
    with pytest.raises(VersionConflict) as raised:
        await store.save_turn(save_request("s1", 0))
    assert raised.value.found == 1


@pytest.mark.parametrize("expected", [0, 1], ids=["new-session", "existing-session"])
async def test_concurrent_savers_of_one_version_exactly_one_wins(
    store: Store, database_url: str, expected: int
) -> None:
    """Of two savers racing on the same version, one commits, the other gets VersionConflict."""
    if expected:
        await store.save_turn(save_request("s1", 0, outbox=0))
    holder = await asyncpg.connect(database_url)
    try:
        # Hold the session row so both savers are queued on it at once when it is released.
        lock = holder.transaction()
        await lock.start()
        if expected:
            await holder.execute("SELECT 1 FROM sessions WHERE id = 's1' FOR UPDATE")
        savers = [
            asyncio.create_task(
                store.save_turn(save_request("s1", expected, state={"by": name}, outbox=2))
            )
            for name in ("a", "b")
        ]
        await asyncio.sleep(0.2)
        await lock.rollback()
        results = await asyncio.gather(*savers, return_exceptions=True)
    finally:
        await holder.close()
    wins = [r for r in results if not isinstance(r, BaseException)]
    conflicts = [r for r in results if isinstance(r, VersionConflict)]
    assert len(wins) == 1 and len(conflicts) == 1
    assert conflicts[0].expected == expected and conflicts[0].found == expected + 1
    winner = "a" if results[0] is wins[0] else "b"
    loaded = await store.load("s1")
    assert (loaded.version, loaded.state) == (expected + 1, {"by": winner})
    assert await _turns(database_url, "s1") == expected + 1
    assert await _outbox(database_url, "s1") == 2


async def test_many_racing_savers_leave_a_gapless_log(store: Store, database_url: str) -> None:
    """Savers that reload and retry on conflict produce one turn and its outbox per version."""

    async def saver(name: str, turns: int) -> int:
        conflicts = 0
        for _ in range(turns):
            while True:
                loaded = await store.load("s1")
                request = save_request("s1", loaded.version, state={"by": name}, outbox=1)
                try:
                    await store.save_turn(request)
                    break
                except VersionConflict:
                    conflicts += 1
        return conflicts

    await asyncio.gather(*(saver(name, 5) for name in "abcd"))
    assert (await store.load("s1")).version == 20
    versions = await _count(
        database_url, "SELECT count(DISTINCT version) FROM turns WHERE session_id = 's1'"
    )
    assert versions == 20 == await _turns(database_url, "s1")
    assert await _count(
        database_url,
        "SELECT count(DISTINCT payload->>'version') FROM outbox WHERE session_id = 's1'",
    ) == 20 == await _outbox(database_url, "s1")


async def test_outbox_rows_exist_iff_the_save_committed(store: Store, database_url: str) -> None:
    """Across committed and conflicting saves, outbox rows exist exactly for committed versions."""
    committed: set[int] = set()
    for expected in [0, 0, 1, 1, 3, 2, 2, 0, 3]:
        try:
            saved = await store.save_turn(save_request("s1", expected, outbox=2))
            committed.add(saved.version)
        except VersionConflict:
            pass
    connection = await asyncpg.connect(database_url)
    try:
        rows = await connection.fetch(
            "SELECT (payload->>'version')::int AS v, count(*) AS n FROM outbox GROUP BY 1"
        )
        turn_versions = {r["version"] for r in await connection.fetch("SELECT version FROM turns")}
    finally:
        await connection.close()
    assert {r["v"]: r["n"] for r in rows} == {v: 2 for v in committed}
    assert turn_versions == committed == {1, 2, 3, 4}


async def test_a_failing_save_leaves_no_turn_and_no_outbox_row(
    store: Store, database_url: str
) -> None:
    """When the last insert of the save fails, the session, turn and outbox stay as before."""
    await store.save_turn(save_request("s1", 0, state={"n": 1}, outbox=1))
    broken = SaveRequest(
        session_id="s1",
        expected_version=1,
        state={"n": 2},
        turn=TurnRecord(input={"session_id": "s1", "message": "x"}),
        # topic is NOT NULL: this row fails after the session update and the turn insert ran
        outbox=[OutboxEntry(topic="ok", key="s1", payload={}),
                OutboxEntry(topic=None, key="s1", payload={})],  # type: ignore[arg-type]
    )
    with pytest.raises(IntegrityError):
        await store.save_turn(broken)
    loaded = await store.load("s1")
    assert (loaded.version, loaded.state) == (1, {"n": 1})
    assert await _turns(database_url, "s1") == 1
    assert await _outbox(database_url, "s1") == 1
    saved = await store.save_turn(save_request("s1", 1, state={"n": 2}))
    assert saved.version == 2


async def test_a_replayed_source_record_is_already_applied(store: Store, database_url: str) -> None:
    """Saving a record whose topic/partition/offset is in the log raises AlreadyApplied."""
    source = SourceRecord(topic="inbound.turns", partition=3, offset=41)
    await store.save_turn(save_request("s1", 0, source=source))
    assert await store.is_applied("inbound.turns", 3, 41)
    assert not await store.is_applied("inbound.turns", 3, 42)
    assert not await store.is_applied("inbound.turns", 2, 41)
    with pytest.raises(AlreadyApplied) as raised:
        await store.save_turn(save_request("s1", 1, source=source, outbox=2))
    assert (raised.value.topic, raised.value.partition, raised.value.offset) == (
        "inbound.turns", 3, 41,
    )
    assert (await store.load("s1")).version == 1
    assert await _outbox(database_url, "s1") == 1


async def test_a_replay_at_a_stale_version_reports_already_applied(store: Store) -> None:
    """A replay computed from the pre-apply version is reported as applied, not as a conflict."""
    source = SourceRecord(topic="inbound.turns", partition=0, offset=7)
    await store.save_turn(save_request("s1", 0, source=source))
    with pytest.raises(AlreadyApplied):
        await store.save_turn(save_request("s1", 0, source=source))


async def test_the_same_offset_on_another_partition_is_a_new_record(store: Store) -> None:
    """Dedupe is by topic, partition and offset together; turns without a source never clash."""
    await store.save_turn(save_request("s1", 0, source=SourceRecord("inbound.turns", 0, 5)))
    await store.save_turn(save_request("s1", 1, source=SourceRecord("inbound.turns", 1, 5)))
    await store.save_turn(save_request("s1", 2, source=SourceRecord("other.topic", 0, 5)))
    await store.save_turn(save_request("s1", 3))
    await store.save_turn(save_request("s1", 4))
    assert (await store.load("s1")).version == 5


async def test_load_says_whether_its_source_record_is_applied(store: Store) -> None:
    """`load(source=...)` reports a record already in the log as applied, and only that record."""
    source = SourceRecord(topic="inbound.turns", partition=3, offset=41)
    assert not (await store.load("s1", source=source)).applied
    await store.save_turn(save_request("s1", 0, source=source))
    assert (await store.load("s1", source=source)).applied
    assert not (await store.load("s1", source=SourceRecord("inbound.turns", 3, 42))).applied
    assert not (await store.load("s1", source=SourceRecord("inbound.turns", 2, 41))).applied
    assert not (await store.load("s1")).applied


async def test_a_dead_lettered_source_loads_as_applied_and_only_that_one(store: Store) -> None:
    """A record the consumer dead-lettered counts as applied to the replay check (twice
    stored, still one row); its input id is not remembered, so a re-drive at another offset
    is no duplicate; other sources and a save of the session are unaffected."""
    source = SourceRecord(topic="inbound.turns", partition=1, offset=7)
    await store.record_dead_lettered("s1", [source], "invalid-request")
    await store.record_dead_lettered("s1", [source], "invalid-request")
    assert (await store.load("s1", source=source, input_id="m7")).applied
    assert not (await store.load("s1", source=source, input_id="m7")).duplicate
    assert not (await store.load("s1", source=SourceRecord("inbound.turns", 1, 8))).applied
    await store.save_turn(save_request("s1", 0, source=SourceRecord("inbound.turns", 1, 8)))
    assert not await store.is_applied("inbound.turns", 1, 7)  # the turn log has no turn for it
    async with store.engine.connect() as connection:
        rows = (await connection.execute(text(
            "SELECT session_id, reason FROM dead_lettered_sources"))).all()
    assert [tuple(r) for r in rows] == [("s1", "invalid-request")]


async def test_load_counts_the_sessions_unpublished_outbox_rows(store: Store) -> None:
    """`load` counts the session's rows not yet published, and no other session's rows."""
    assert (await store.load("s1")).unpublished == 0
    saved = await store.save_turn(save_request("s1", 0, outbox=3))
    await store.save_turn(save_request("s2", 0, outbox=2))
    assert (await store.load("s1")).unpublished == 3
    await store.mark_published(saved.outbox_ids[:2])
    assert (await store.load("s1")).unpublished == 1
    assert (await store.load("s2")).unpublished == 2
