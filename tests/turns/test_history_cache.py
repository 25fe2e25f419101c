"""The history windows a consumer keeps between a conversation's turns (engine/history.py).

What must hold: on every turn the engine gets exactly the history a fresh load of the session
gives at that version, with or without a kept window, for many conversations on the same agent
at once (nothing of one reaches another), across bursts, events and wakes that send nothing, a
session moved on by another consumer, a revoked partition, pruned recordings and a small
``HISTORY_LIMIT``; and the windows follow a simple model of the turn log (property test).
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.metrics import REGISTRY
from consumer.outbox import OutboxPublisher
from consumer.turns.parser import ParsedInput, parse_record
from consumer.turns.pipeline import OutboundTopics, TurnPipeline, TurnWork, burst_of
from engine import Agent, FakeClock, HistoryEntry, ModelRequest, ModelResponse
from engine.history import HistoryCache
from store import LoadRequest, SourceRecord, Store
from tests.consumer.fakes import FakeProducer

TOPICS = OutboundTopics(messages="out.m", schedule="out.s")


class Echo:
    """Speaks ``"<the customer's last message> / <n>"``: a reply names its conversation."""

    def __init__(self) -> None:
        self.calls = 0

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if request.schema_name != "speak":
            return ModelResponse(json={})
        said = next(m.text for m in reversed(request.messages) if m.role == "user")
        return ModelResponse(json={"message": f"{said} / {self.calls}"})


def dumped(history: list[Any]) -> list[dict[str, Any]]:
    """Entries (dicts or ``HistoryEntry``) as the engine reads them."""
    return [HistoryEntry.model_validate(e).model_dump() for e in history]


class Checking:
    """The engine agent, after checking the history each turn is given against a fresh load of
    the session (which the turn's own save has not reached yet)."""

    def __init__(self, store: Store, limit: int) -> None:
        self.agent = Agent(name="Ana", provider=Echo(), clock=FakeClock("2026-03-01T10:00:00Z"))
        self.store = store
        self.limit = limit
        self.turns = 0
        self.kept = 0  # turns given entries the consumer kept (HistoryEntry objects)

    async def turn(self, request: dict[str, Any]) -> Any:
        sid = request["session_id"]
        fresh = await self.store.load(sid, history_limit=self.limit)
        given = request["history"]
        if all(type(e) is dict for e in given):  # as loaded (no cache, or refused by it)
            assert given == fresh.history, sid
        else:
            assert dumped(given) == dumped(fresh.history), sid
        texts = [e["text"] if type(e) is dict else e.text for e in given]
        assert all(t is None or t.startswith(f"{sid}:") for t in texts), sid
        if given and all(type(e) is HistoryEntry for e in given):
            self.kept += 1
        self.turns += 1
        return await self.agent.turn(request)


def pipeline(store: Store, agent: Any, *, limit: int, sessions: int) -> TurnPipeline:
    publisher = OutboxPublisher(store, FakeProducer())  # type: ignore[arg-type]
    return TurnPipeline(store=store, agent=agent, publisher=publisher, topics=TOPICS,
                        history_limit=limit, history_cache_sessions=sessions)


_offsets = iter(range(10**9))


def work(sid: str, body: dict[str, Any], partition: int = 0) -> TurnWork:
    raw = json.dumps({"session_id": sid, **body}).encode()
    parsed = parse_record(sid.encode(), raw, max_bytes=10_000)
    assert isinstance(parsed, ParsedInput), parsed
    return TurnWork(parsed=parsed, source=SourceRecord("in", partition, next(_offsets)))


def message(sid: str, n: int, partition: int = 0, *, at: bool = False) -> TurnWork:
    body: dict[str, Any] = {"message": f"{sid}: message {n}", "id": f"{sid}-m{n}"}
    if at:
        body["at"] = f"2026-03-01T09:{n % 60:02d}:00Z"
    return work(sid, body, partition)


def nth_input(sid: str, n: int) -> TurnWork:
    """A message, a message dated by the client, a burst of three, an event, a wake."""
    kind = n % 5
    if kind == 3:
        return work(sid, {"event": "seen", "key": f"{sid}-e{n}"})
    if kind == 4:
        return work(sid, {"wake": f"nothing-{n}"})
    if kind == 2:
        return burst_of([message(sid, n * 10 + i) for i in range(3)])
    return message(sid, n, at=kind == 1)


@pytest.mark.parametrize("limit", [7, 50])
async def test_every_turn_of_many_conversations_gets_what_a_load_gives(
    store: Store, limit: int
) -> None:
    """Twenty conversations at once, twelve turns each of every kind: each turn's history equals
    a fresh load's, windows are kept from the second turn on, and pruning recordings midway
    changes nothing."""
    agent = Checking(store, limit)
    served = pipeline(store, agent, limit=limit, sessions=1000)
    sids = [f"c{n:02d}" for n in range(20)]

    async def conversation(sid: str, turns: range) -> None:
        for n in turns:
            result = await served.apply(nth_input(sid, n))
            assert result.status == "applied", (sid, n, result)

    await asyncio.gather(*(conversation(sid, range(6)) for sid in sids))
    await store.prune_recordings(older_than=timedelta(0))
    await asyncio.gather(*(conversation(sid, range(6, 12)) for sid in sids))
    assert agent.turns == 12 * len(sids)
    # Every turn after a conversation's first that has any history was given the kept window.
    assert agent.kept >= 10 * len(sids)
    loaded = await store.load("c00", history_limit=100)
    roles = {e["role"] for e in loaded.history}
    assert roles == {"user", "assistant"} and len(loaded.history) > 7  # 7: windows were trimmed


async def test_a_session_moved_on_elsewhere_is_loaded_again(store: Store) -> None:
    """Two consumers take turns on the same conversations (a partition moving back and forth):
    each one's kept window is of a version the session has left, and is not served."""
    first = Checking(store, 5)
    second = Checking(store, 5)
    one = pipeline(store, first, limit=5, sessions=100)
    other = pipeline(store, second, limit=5, sessions=100)
    for n in range(8):
        for sid in ("a", "b", "c"):
            served = one if n % 3 else other
            assert (await served.apply(message(sid, n))).status == "applied"
    assert first.turns + second.turns == 24


async def test_a_revoked_partition_drops_its_windows(store: Store) -> None:
    """The windows of sessions last served from a revoked partition are forgotten (their next
    load sends the history); the others are kept."""
    agent = Checking(store, 10)
    served = pipeline(store, agent, limit=10, sessions=100)
    before = {source: _history_loads(source) for source in ("held", "loaded")}
    for n in range(2):
        await served.apply(message("p0", n, partition=0))
        await served.apply(message("p1", n, partition=1))
    asked: list[LoadRequest] = []
    load = served._loads.load

    async def spying(request: LoadRequest) -> Any:
        asked.append(request)
        return await load(request)

    served._loads.load = spying  # type: ignore[method-assign]
    served.forget_partitions({("in", 0)})
    assert REGISTRY.get_sample_value("turnflow_history_windows") == 1
    await served.apply(message("p0", 2, partition=0))
    await served.apply(message("p1", 2, partition=1))
    assert [(r.session_id, r.history_version) for r in asked] == [("p0", None), ("p1", 2)]
    # Counted: the second turns and p1's third from the windows, p0's third loaded; the
    # first turns of new conversations not at all.
    assert _history_loads("held") - before["held"] == 3
    assert _history_loads("loaded") - before["loaded"] == 1
    assert REGISTRY.get_sample_value("turnflow_history_windows") == 2


def _history_loads(source: str) -> float:
    return REGISTRY.get_sample_value("turnflow_history_loads_total", {"history": source}) or 0.0


async def test_a_conflict_or_an_error_leaves_no_window(store: Store) -> None:
    """A turn whose save loses the version race, or whose engine fails, keeps nothing: the
    next turn loads the history, and gets what a load gives."""
    agent = Checking(store, 10)
    served = pipeline(store, agent, limit=10, sessions=100)
    rival = pipeline(store, Checking(store, 10), limit=10, sessions=0)
    await served.apply(message("s", 0))
    real = agent.agent.turn

    async def raced(request: dict[str, Any]) -> Any:
        if request.get("message") == "s: message 1":
            await rival.apply(message("s", 100))  # saves first: this turn's save conflicts
        return await real(request)

    agent.agent = type("Raced", (), {"turn": staticmethod(raced)})()  # type: ignore[assignment]
    result = await served.apply(message("s", 1))
    assert result.conflicts == 1 and result.status == "applied"

    async def broken(request: dict[str, Any]) -> Any:
        raise RuntimeError("engine down")

    agent.agent = type("Broken", (), {"turn": staticmethod(broken)})()  # type: ignore[assignment]
    with pytest.raises(RuntimeError):
        await served.apply(message("s", 2))
    assert served._histories.held("s") is None
    agent.agent = type("Raced", (), {"turn": staticmethod(real)})()  # type: ignore[assignment]
    await served.apply(message("s", 3))
    assert served._histories.held("s") == 4


async def test_no_history_limit_and_no_cache(store: Store) -> None:
    """``HISTORY_LIMIT`` 0 gives every turn no history (the window kept is empty); 0 kept
    sessions gives the loaded dicts to the engine as before, and keeps nothing."""
    for limit, sessions in ((0, 100), (4, 0)):
        agent = Checking(store, limit)
        served = pipeline(store, agent, limit=limit, sessions=sessions)
        for n in range(4):
            await served.apply(message(f"l{limit}", n))
        assert agent.kept == 0 and agent.turns == 4
        if sessions:
            assert served._histories._windows[f"l{limit}"].entries == ()
        else:
            assert len(served._histories) == 0


# -- the windows against a model of the turn log ---------------------------------------------

operations = st.lists(
    st.tuples(
        st.sampled_from(["turn", "turn", "turn", "elsewhere", "conflict", "revoke"]),
        st.integers(0, 3),  # session
        st.integers(0, 3),  # entries the turn gives
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops=operations, limit=st.integers(0, 6), sessions=st.integers(0, 3))
def test_windows_follow_the_turn_log(
    ops: list[tuple[str, int, int]], limit: int, sessions: int
) -> None:
    """A turn log per session (the model), turns served through the cache as the pipeline
    does, turns saved by another consumer, conflicts and revoked partitions: whatever the cache
    hands a turn is the last ``limit`` entries of the log at the version loaded, and it never
    keeps more than ``sessions`` windows of at most ``limit`` entries."""
    cache = HistoryCache(max_sessions=sessions, limit=limit)
    turns: dict[str, list[list[dict[str, Any]]]] = {}  # each session's turns' entries
    made = iter(range(10**6))

    def entries(count: int, sid: str) -> list[dict[str, Any]]:
        return [{"role": ("user", "assistant")[i % 2], "text": f"{sid}:{next(made)}",
                 "at": None} for i in range(count)]

    def window(sid: str, version: int) -> list[dict[str, Any]]:
        log = [e for turn in turns.get(sid, [])[:version] for e in turn]
        return log[max(0, len(log) - limit):] if limit else []

    for op, n, count in ops:
        sid = f"s{n}"
        version = len(turns.get(sid, []))
        if op == "elsewhere":  # another consumer saved a turn
            turns.setdefault(sid, []).append(entries(count, sid))
            continue
        if op == "revoke":
            cache.drop_partitions({("in", n % 2)})
            continue
        held = cache.held(sid) == version  # the load leaves the history out
        loaded = [] if held else [dict(e) for e in window(sid, version)]
        given = cache.take(sid, version, loaded, held)
        assert given is not None  # nothing else took the window meanwhile
        assert dumped(list(given)) == dumped(window(sid, version))
        if op == "conflict":
            continue  # nothing saved, nothing kept
        gave = entries(count, sid)
        turns.setdefault(sid, []).append(gave)
        cache.extend(sid, version, given, version + 1, [dict(e) for e in gave], ("in", n % 2))
        assert len(cache) <= sessions
        for other in turns:
            if (kept := cache.held(other)) is not None:
                assert len(cache._windows[other].entries) <= limit
                assert dumped(list(cache._windows[other].entries)) == dumped(window(other, kept))


async def test_history_the_engine_refuses_is_refused_as_before(store: Store) -> None:
    """A stored entry the engine's validation refuses (a reply logged without text) is handed
    to the engine as loaded, which refuses the turn as it always did; nothing is kept, and a
    conversation beside it is served from its window."""
    from dataclasses import replace

    from engine.errors import TurnRequestError
    from tests.store.builders import save_request

    bad = save_request("bad", 0, message="bad: oi", replies=["x"])
    await store.save_turn(replace(bad, turn=replace(bad.turn, messages=[{"kind": "ai"}])))
    for sessions in (100, 0):
        agent = Checking(store, 10)
        served = pipeline(store, agent, limit=10, sessions=sessions)
        with pytest.raises(TurnRequestError, match="history"):
            await served.apply(message("bad", sessions))
        assert served._histories.held("bad") is None
        for n in range(3):
            await served.apply(message(f"good{sessions}", n))
        assert agent.kept == (2 if sessions else 0)
