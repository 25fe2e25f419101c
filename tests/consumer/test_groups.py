"""SaveGroup and LoadGroup: turns running together share one statement, each keeping its own
outcome."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from consumer.groups import LoadGroup, SaveGroup
from store import (
    AlreadyApplied,
    LoadedSession,
    LoadRequest,
    SavedTurn,
    SourceRecord,
    Store,
    VersionConflict,
    direct,
)
from tests.consumer.fakes import FakeStore
from tests.store.builders import save_request


async def test_sixty_conversations_share_statements_and_keep_their_rows(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[str] = []
    monkeypatch.setattr(direct, "statement_listeners", [sent.append])
    group = SaveGroup(store)
    requests = [
        save_request(f"c{n}", 0, outbox=1 + n % 2, source=SourceRecord("in", n % 3, n))
        for n in range(60)
    ]
    results = await asyncio.gather(*(group.save(r) for r in requests))
    assert all(r.version == 1 for r in results)
    assert len(sent) < len(requests)  # the first goes alone, the rest in groups
    ids = [i for r in results for i in r.outbox_ids]
    assert len(ids) == len(set(ids))
    for request, result in zip(requests, results, strict=True):
        assert len(result.outbox_ids) == len(request.outbox)
        assert (await store.load(request.session_id)).unpublished == len(request.outbox)


async def test_each_waiter_gets_its_own_error(store: Store) -> None:
    await store.save_turn(save_request("a", 0, source=SourceRecord("in", 0, 1)))
    group = SaveGroup(store)
    outcomes = await asyncio.gather(
        group.save(save_request("b", 0)),
        group.save(save_request("a", 4)),  # stale
        group.save(save_request("c", 0, source=SourceRecord("in", 0, 1))),  # a's record
        group.save(save_request("d", 0)),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], SavedTurn) and isinstance(outcomes[3], SavedTurn)
    assert isinstance(outcomes[1], VersionConflict)
    assert isinstance(outcomes[2], AlreadyApplied)


async def test_one_session_is_never_twice_in_a_statement() -> None:
    """Two saves of one session (the consumer never makes them at once, but if it did) go in
    different statements, in arrival order: the second sees the first's version."""
    store = FakeStore()
    groups: list[list[str]] = []
    save_turns = store.save_turns

    async def recorded(requests: list) -> list:  # type: ignore[type-arg]
        groups.append([r.session_id for r in requests])
        return await save_turns(requests)

    store.save_turns = recorded  # type: ignore[method-assign]
    group = SaveGroup(store)  # type: ignore[arg-type]
    first = save_request("s", 0, source=SourceRecord("in", 0, 1))
    second = save_request("s", 1, source=SourceRecord("in", 0, 2))
    other = save_request("t", 0, source=SourceRecord("in", 0, 3))
    results = await asyncio.gather(group.save(first), group.save(second), group.save(other))
    assert [r.version for r in results] == [1, 2, 1]
    assert all(len(g) == len(set(g)) for g in groups)


async def test_a_cancelled_waiter_does_not_stop_the_others() -> None:
    store = FakeStore()
    group = SaveGroup(store)  # type: ignore[arg-type]
    gate = asyncio.Event()
    save_turns = store.save_turns

    async def slow(requests: list) -> list:  # type: ignore[type-arg]
        await gate.wait()
        return await save_turns(requests)

    store.save_turns = slow  # type: ignore[method-assign]
    first = asyncio.create_task(group.save(save_request("a", 0, source=SourceRecord("in", 0, 1))))
    await asyncio.sleep(0)
    second = asyncio.create_task(group.save(save_request("b", 0, source=SourceRecord("in", 0, 2))))
    third = asyncio.create_task(group.save(save_request("c", 0, source=SourceRecord("in", 0, 3))))
    await asyncio.sleep(0)
    second.cancel()
    gate.set()
    assert (await first).version == 1
    assert (await third).version == 1
    with pytest.raises(asyncio.CancelledError):
        await second


async def test_close_ends_the_statement_its_cancelled_callers_left_running() -> None:
    """Cancelling every caller leaves the group's statement running (it is shared); ``close``
    cancels it and the requests queued behind it, and returns once it has ended."""
    store = FakeStore()
    started = asyncio.Event()
    ended: list[str] = []

    async def held(requests: list) -> list:  # type: ignore[type-arg]
        started.set()
        try:
            await asyncio.Event().wait()  # a statement that never answers
        finally:
            ended.append(",".join(r.session_id for r in requests))
        raise AssertionError("unreachable")

    store.save_turns = held  # type: ignore[method-assign]
    group = SaveGroup(store)  # type: ignore[arg-type]
    first = asyncio.create_task(group.save(save_request("a", 0)))
    await started.wait()
    queued = asyncio.create_task(group.save(save_request("b", 0)))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    await asyncio.sleep(0.01)
    assert ended == []  # the statement outlived its caller
    await group.close()
    assert ended == ["a"]
    with pytest.raises(asyncio.CancelledError):
        await queued
    await group.close()  # idempotent


async def test_closed_groups_return_every_pooled_connection(
    store: Store, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turns cancelled while their save waits on a lock, then the group closed: the statement
    is cancelled and its connection returned, so closing the store closes every connection."""
    sent = asyncio.Event()
    monkeypatch.setattr(direct, "statement_listeners", [lambda _sql: sent.set()])
    blocker = await asyncpg.connect(database_url)
    try:
        await blocker.execute("BEGIN; LOCK TABLE sessions IN EXCLUSIVE MODE")
        group = SaveGroup(store)
        turns = [asyncio.create_task(group.save(save_request(f"x{n}", 0))) for n in range(30)]
        await asyncio.wait_for(sent.wait(), 10)
        for turn in turns:
            turn.cancel()
        await asyncio.gather(*turns, return_exceptions=True)
        await asyncio.sleep(0.05)
        assert store.engine.pool.checkedout() == 1  # type: ignore[attr-defined]
        await group.close()
        assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        await blocker.close()
    assert (await store.load("x0")).version == 0  # the cancelled save wrote nothing


def test_a_group_needs_room_for_one() -> None:
    with pytest.raises(ValueError, match="max_group"):
        SaveGroup(FakeStore(), max_group=0)  # type: ignore[arg-type]


async def test_loads_started_together_share_statements(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(50):
        await store.save_turn(save_request(f"l{n}", 0, replies=[f"hello {n}"],
                                           source=SourceRecord("in", 0, 5000 + n)))
    sent: list[str] = []
    monkeypatch.setattr(direct, "statement_listeners", [sent.append])
    group = LoadGroup(store, history_limit=10)
    asks = [LoadRequest(f"l{n}", sources=(SourceRecord("in", 0, 5000 + n),)) for n in range(50)]
    loaded = await asyncio.gather(*(group.load(a) for a in asks))
    assert len(sent) < len(asks)
    for n, one in enumerate(loaded):
        assert one.version == 1 and one.applied
        assert [e["text"] for e in one.history if e["role"] == "assistant"] == [f"hello {n}"]


class _OneBadSession:
    """``load_many`` of a store where one session's data cannot be read (a data error, the
    same on every attempt), or where the database is gone (an outage)."""

    def __init__(self, *, outage: bool = False) -> None:
        self.outage = outage
        self.statements: list[list[str]] = []

    async def load_many(
        self, requests: list[LoadRequest], *, history_limit: int, history_as_text: bool
    ) -> list[Any]:
        self.statements.append([r.session_id for r in requests])
        await asyncio.sleep(0)
        if self.outage:
            raise ConnectionResetError("the database is gone")
        if any(r.session_id == "bad" for r in requests):
            raise ValueError("a stored value that cannot be decoded")
        return [LoadedSession(state=None, version=0, history=[]) for _ in requests]


async def test_one_sessions_bad_data_fails_only_its_own_load() -> None:
    """A data error in a grouped load is narrowed down request by request: the bad session's
    turn gets the error, the others their sessions, instead of all of them dead-lettered."""
    store = _OneBadSession()
    group = LoadGroup(store, history_limit=10)  # type: ignore[arg-type]
    names = ["a", "bad", "b", "c"]
    results = await asyncio.gather(*(group.load(LoadRequest(n)) for n in names),
                                   return_exceptions=True)
    outcomes = dict(zip(names, results, strict=True))
    assert isinstance(outcomes["bad"], ValueError)
    assert all(isinstance(outcomes[n], LoadedSession) for n in ("a", "b", "c"))
    assert store.statements == [names, ["a"], ["bad"], ["b"], ["c"]]


async def test_an_outage_reaches_the_whole_group_without_a_statement_each() -> None:
    """A database that is gone fails every load of the group at once (each turn retries); it
    is not tried again request by request."""
    store = _OneBadSession(outage=True)
    group = LoadGroup(store, history_limit=10)  # type: ignore[arg-type]
    results = await asyncio.gather(*(group.load(LoadRequest(n)) for n in "abc"),
                                   return_exceptions=True)
    assert all(isinstance(r, ConnectionResetError) for r in results)
    assert store.statements == [["a", "b", "c"]]
