"""Timers: set, replace, delete, and claim by the database clock without double claims."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone

import asyncpg
import pytest

from store import Store, TimerEntry


async def _db_now(database_url: str) -> datetime:
    connection = await asyncpg.connect(database_url)
    try:
        now: datetime = await connection.fetchval("SELECT now()")
        return now
    finally:
        await connection.close()


async def _all_pairs(database_url: str) -> list[tuple[str, str]]:
    connection = await asyncpg.connect(database_url)
    try:
        rows = await connection.fetch("SELECT session_id, key FROM timers")
        return [(r["session_id"], r["key"]) for r in rows]
    finally:
        await connection.close()


async def _keys(store: Store, limit: int = 100) -> list[str]:
    async with store.claim_due(limit) as batch:
        return [t.key for t in batch.timers]


@pytest.fixture
async def now(database_url: str) -> datetime:
    """The database clock at the start of the test."""
    return await _db_now(database_url)


async def test_only_timers_due_by_the_database_clock_are_claimed(
    store: Store, now: datetime
) -> None:
    """A timer at or before the database's now() is due; one in the future is not."""
    await store.upsert_timers([
        TimerEntry(key="past", session_id="s1", at=now - timedelta(seconds=5)),
        TimerEntry(key="future", session_id="s1", at=now + timedelta(hours=1)),
    ])
    async with store.claim_due(10) as batch:
        assert [(t.key, t.session_id) for t in batch.timers] == [("past", "s1")]
        assert batch.db_now >= now
    assert await store.timers_pending() == 2


async def test_claimed_timers_come_earliest_first_up_to_the_limit(
    store: Store, now: datetime
) -> None:
    """Claims are ordered by due time and capped by `limit`."""
    await store.upsert_timers([
        TimerEntry(key=f"k{i}", session_id="s1", at=now - timedelta(seconds=10 - i))
        for i in (3, 1, 2, 0)
    ])
    assert await _keys(store, limit=3) == ["k0", "k1", "k2"]


async def test_upsert_moves_an_existing_key(store: Store, now: datetime) -> None:
    """Setting a key again replaces its time; keys are unique."""
    await store.upsert_timers([TimerEntry(key="k", session_id="s1", at=now + timedelta(hours=1))])
    await store.upsert_timers([TimerEntry(key="k", session_id="s1", at=now - timedelta(seconds=1))])
    assert await store.timers_pending() == 1
    assert await _keys(store) == ["k"]


async def test_replaces_deletes_the_named_timer(store: Store, now: datetime) -> None:
    """An entry with `replaces` deletes that key and sets its own in the same transaction."""
    past = now - timedelta(seconds=1)
    await store.upsert_timers([TimerEntry(key="old", session_id="s1", at=past)])
    await store.upsert_timers([TimerEntry(key="new", session_id="s1", at=past, replaces="old")])
    assert await _keys(store) == ["new"]


async def test_replaces_within_one_batch_applies_in_order(store: Store, now: datetime) -> None:
    """A batch is applied entry by entry: a later `replaces` removes an earlier entry's key."""
    past = now - timedelta(seconds=1)
    await store.upsert_timers([
        TimerEntry(key="a", session_id="s1", at=past),
        TimerEntry(key="b", session_id="s1", at=past, replaces="a"),
        TimerEntry(key="a", session_id="s1", at=past, replaces="c"),
        TimerEntry(key="c", session_id="s1", at=past),
        TimerEntry(key="d", session_id="s1", at=past, replaces="d"),
    ])
    assert sorted(await _keys(store)) == ["a", "b", "c", "d"]
    await store.upsert_timers([
        TimerEntry(key="e", session_id="s1", at=past, replaces="c"),
        TimerEntry(key="c", session_id="s1", at=past),
        TimerEntry(key="f", session_id="s1", at=past, replaces="c"),
    ])
    assert sorted(await _keys(store)) == ["a", "b", "d", "e", "f"]


async def test_naive_times_are_refused(store: Store) -> None:
    """A timer without a timezone is a caller bug, refused before anything is written."""
    with pytest.raises(ValueError, match="timezone-aware"):
        await store.upsert_timers([TimerEntry(key="k", session_id="s1", at=datetime(2026, 1, 1))])
    assert await store.timers_pending() == 0


async def test_delete_timers_by_session_and_key(store: Store, now: datetime) -> None:
    """Deleting by (session id, key) returns how many existed and leaves the others,
    including another session's timer under the same key."""
    await store.upsert_timers([
        TimerEntry(key=k, session_id=s, at=now + timedelta(hours=1))
        for k in "abc"
        for s in ("s1", "s2")
    ])
    assert await store.delete_timers([("s1", "a"), ("s1", "c"), ("s1", "zz"), ("s3", "b")]) == 2
    assert await store.timers_pending() == 4


async def test_equal_keys_of_different_sessions_are_different_timers(
    store: Store, now: datetime
) -> None:
    """Forty conversations that set the same key each keep their own timer, due at their own
    time, and each claimed row names its own session."""
    sessions = [f"s{i}" for i in range(40)]
    await store.upsert_timers([
        TimerEntry(key="r1:wait:1", session_id=s, at=now - timedelta(seconds=i))
        for i, s in enumerate(sessions)
    ])
    assert await store.timers_pending() == 40
    async with store.claim_due(100) as batch:
        claimed = {(t.session_id, t.key): t.at for t in batch.timers}
        await batch.delete()
    assert claimed == {
        (s, "r1:wait:1"): now - timedelta(seconds=i) for i, s in enumerate(sessions)
    }
    assert await store.timers_pending() == 0


async def test_replaces_acts_within_its_own_session(
    store: Store, now: datetime, database_url: str
) -> None:
    """An entry's `replaces` deletes that key of its own session only: another conversation's
    timer under the same key survives."""
    later = now + timedelta(hours=1)
    await store.upsert_timers([
        TimerEntry(key="old", session_id="s1", at=later),
        TimerEntry(key="old", session_id="s2", at=later),
    ])
    await store.upsert_timers([TimerEntry(key="new", session_id="s2", at=later, replaces="old")])
    assert sorted(await _all_pairs(database_url)) == [("s1", "old"), ("s2", "new")]


async def test_deleting_a_claimed_batch_commits_on_exit(store: Store, now: datetime) -> None:
    """Timers deleted inside the claim are gone afterwards; a raising block keeps them."""
    await store.upsert_timers([
        TimerEntry(key=k, session_id="s1", at=now - timedelta(seconds=1)) for k in "ab"
    ])
    with pytest.raises(RuntimeError):
        async with store.claim_due(10) as batch:
            await batch.delete()
            raise RuntimeError("producer failed")
    assert await store.timers_pending() == 2
    async with store.claim_due(10) as batch:
        assert await batch.delete() == 2
    assert await store.timers_pending() == 0


async def test_two_claimers_never_claim_the_same_timer(store: Store, now: datetime) -> None:
    """Concurrent claimers split the due timers between them; none is claimed twice or lost."""
    keys = [f"k{i:03}" for i in range(200)]
    await store.upsert_timers([
        TimerEntry(key=k, session_id=f"s{i % 7}", at=now - timedelta(seconds=1))
        for i, k in enumerate(keys)
    ])
    claims: dict[str, list[str]] = {"a": [], "b": []}
    both_holding = asyncio.Barrier(2)

    async def claimer(name: str) -> None:
        first = True
        while True:
            async with store.claim_due(15) as batch:
                if first:
                    # both claimers hold a batch at the same time at least once
                    await asyncio.wait_for(both_holding.wait(), timeout=10)
                    first = False
                if not batch.timers:
                    return
                claims[name].extend(t.key for t in batch.timers)
                await asyncio.sleep(0)
                await batch.delete()

    await asyncio.gather(claimer("a"), claimer("b"))
    assert claims["a"] and claims["b"]
    assert not set(claims["a"]) & set(claims["b"])
    assert sorted(claims["a"] + claims["b"]) == keys
    assert await store.timers_pending() == 0


async def test_a_held_claim_is_invisible_to_a_second_claimer(store: Store, now: datetime) -> None:
    """While one claimer holds a timer, another sees nothing due rather than waiting."""
    await store.upsert_timers([TimerEntry(key="k", session_id="s1", at=now - timedelta(seconds=1))])
    async with store.claim_due(10) as held:
        assert [t.key for t in held.timers] == ["k"]
        assert await asyncio.wait_for(_keys(store), timeout=10) == []
    assert await _keys(store) == ["k"]


async def test_next_due_in_follows_the_earliest_timer(store: Store, now: datetime) -> None:
    """`next_due_in` is None with no timers, 0 when overdue, else the seconds to the earliest."""
    assert await store.next_due_in() is None
    hour = timedelta(hours=1)
    await store.upsert_timers([TimerEntry(key="later", session_id="s1", at=now + hour)])
    due_in = await store.next_due_in()
    assert due_in is not None and 3500 < due_in <= 3600
    await store.upsert_timers([TimerEntry(key="late", session_id="s1", at=now - hour)])
    assert await store.next_due_in() == 0.0


async def test_timers_accept_other_timezones(store: Store) -> None:
    """A due time in any timezone is compared as the same instant."""
    at = datetime(2000, 1, 1, 9, tzinfo=timezone(timedelta(hours=-3)))
    await store.upsert_timers([TimerEntry(key="k", session_id="s1", at=at)])
    async with store.claim_due(1) as batch:
        assert batch.timers[0].at == at
        assert batch.timers[0].at.astimezone(UTC).hour == 12
