"""The pipeline saves each turn with the engine's clock and, by setting, the model's side."""

from __future__ import annotations

import asyncio
from typing import Any

from consumer.hosting.routing import BINDING_KEY, Route
from consumer.outbox import OutboxPublisher
from consumer.turns.parser import ParsedInput, parse_record
from consumer.turns.pipeline import OutboundTopics, TurnPipeline, TurnWork
from engine import Agent, FakeClock, MockProvider, ModelRequest
from engine.recording import RecordingLevel, recorded_agent, state_digest
from store import SourceRecord
from tests.consumer.fakes import FakeProducer, FakeStore

FLOWS: list[dict[str, Any]] = [{
    "id": "order",
    "on": [{"message": ["order"]}],
    "steps": [{"id": "ask", "collect": ["size"], "prompt": "Ask the size."},
              {"id": "done", "say": "Size {{size}}."}],
}]


def _answer(request: ModelRequest) -> dict[str, Any]:
    words = str(request.meta.get("message") or "").split()
    size = words[-1] if words and words[-1] in ("S", "M", "L") else None
    if request.schema_name == "speak":
        return {"message": "Which size?", "size": size}
    return {"flows": {"order": 90}, "fields": {"size": size}}


def _pipeline(store: FakeStore, level: RecordingLevel, clock: FakeClock) -> TurnPipeline:
    agent = recorded_agent(Agent(name="Bo", provider=MockProvider([_answer] * 200), clock=clock,
                                 flows=FLOWS, fields={"size": {"type": "string"}}))
    return TurnPipeline(store=store, agent=agent,  # type: ignore[arg-type]
                        publisher=OutboxPublisher(store, FakeProducer()),  # type: ignore[arg-type]
                        topics=OutboundTopics(messages="m", schedule="s"), recording=level)


def _work(session_id: str, text: str, offset: int) -> TurnWork:
    raw = f'{{"session_id": "{session_id}", "message": "{text}", "id": "{offset}"}}'.encode()
    parsed = parse_record(session_id.encode(), raw, max_bytes=1000)
    assert isinstance(parsed, ParsedInput)
    return TurnWork(parsed=parsed, source=SourceRecord("in", 0, offset))


async def test_each_saved_turn_holds_its_own_calls_fields_and_clock() -> None:
    """Many sessions through one pipeline at once: each turn row holds the engine's clock,
    its own calls and the fields it wrote, never another session's."""
    store, clock = FakeStore(), FakeClock("2026-04-01T10:00:00Z")
    pipeline = _pipeline(store, "envelopes", clock)
    sizes = ["S", "M", "L"]

    async def session(n: int) -> None:
        await pipeline.apply(_work(f"s-{n}", "order please", 2 * n))
        await pipeline.apply(_work(f"s-{n}", f"size {sizes[n % 3]}", 2 * n + 1))

    await asyncio.gather(*(session(n) for n in range(24)))
    by_session: dict[str, list[Any]] = {}
    for save in store.saves:
        by_session.setdefault(save.session_id, []).append(save.turn)
    assert len(by_session) == 24
    for session_id, (first, second) in by_session.items():
        n = int(session_id.split("-")[1])
        assert first.clock_at == clock.now()
        assert [c["kind"] for c in first.model_calls["calls"]] == ["understand", "speak"]
        assert first.model_calls["fields"] == {}
        assert second.model_calls["fields"] == {"size": sizes[n % 3]}
        assert [c["reply"]["json"].get("size") for c in second.model_calls["calls"]] == [
            sizes[n % 3]]
    # Each turn's digest is of the state its own save holds (the dump the pipeline saves).
    assert all(s.turn.model_calls["state"] == state_digest(s.state) for s in store.saves)


class _Bound:
    """A router binding every conversation to one agent, as a registry router does."""

    def __init__(self, agent: Any) -> None:
        self.route_ = Route(agent=agent, agent_id="bo", version=1, workspace="w",
                            binding={"agent_id": "bo", "workspace": "w"})

    async def route(self, parsed: Any, state: Any) -> Route:
        return self.route_


async def test_the_digest_is_of_the_session_the_engine_left_not_of_its_binding() -> None:
    """The binding a router writes into the saved state's metadata is the host's, not the
    engine's: the recording's digest is of the session the turn left (what a replay of the
    turn compares with), taken before the binding joins it."""
    store, clock = FakeStore(), FakeClock("2026-04-01T10:00:00Z")
    agent = recorded_agent(Agent(name="Bo", provider=MockProvider([_answer] * 20), clock=clock,
                                 flows=FLOWS, fields={"size": {"type": "string"}}))
    pipeline = TurnPipeline(store=store, agent=None, router=_Bound(agent),  # type: ignore[arg-type]
                            publisher=OutboxPublisher(store, FakeProducer()),  # type: ignore[arg-type]
                            topics=OutboundTopics(messages="m", schedule="s"),
                            recording="envelopes")
    await pipeline.apply(_work("s-1", "order please", 0))
    await pipeline.apply(_work("s-1", "size M", 1))
    first, second = store.saves
    for save in (first, second):
        assert save.state["metadata"][BINDING_KEY] == {"agent_id": "bo", "workspace": "w"}
    # The first turn started a conversation with no binding: the engine left none.
    unbound = {**first.state, "metadata": {
        k: v for k, v in first.state["metadata"].items() if k != BINDING_KEY}}
    assert first.turn.model_calls["state"] == state_digest(unbound)
    assert first.turn.model_calls["state"] != state_digest(first.state)
    # The second loaded the bound state, so the session the engine left carries the binding.
    assert second.turn.model_calls["state"] == state_digest(second.state)


async def test_recording_off_keeps_the_clock_but_no_calls() -> None:
    """With MODEL_RECORDING=off nothing of the model is saved; the turn's time still is."""
    store, clock = FakeStore(), FakeClock("2026-04-01T10:00:00Z")
    await _pipeline(store, "off", clock).apply(_work("s-1", "order please", 1))
    turn = store.saves[0].turn
    assert turn.model_calls is None and turn.clock_at == clock.now() and turn.llm_calls == 2


class _PruningStore:
    """Counts prune calls and the retention they were given."""

    def __init__(self) -> None:
        self.prunes: list[float] = []
        self.deletes: list[float] = []
        self.partition_units: list[str] = []

    async def prune_recordings(self, *, older_than: Any) -> int:
        self.prunes.append(older_than.total_seconds())
        return 3

    async def delete_published(self, *, older_than: Any) -> int:
        self.deletes.append(older_than.total_seconds())
        return 5

    async def ensure_turn_partitions(self, *, unit: str = "month") -> list[str]:
        self.partition_units.append(unit)
        return []

    async def compact_turn_search(self) -> list[str]:
        return []


async def test_the_relay_prunes_expired_recordings_at_most_once_per_period() -> None:
    """Retention is enforced by the relay: the first pass prunes, the next ones wait."""
    from datetime import timedelta

    from consumer.relay import OutboxRelay

    store = _PruningStore()
    relay = OutboxRelay(None, store, interval_s=1, grace_s=1,  # type: ignore[arg-type]
                        recording_retention=timedelta(days=2), prune_every_s=3600)
    assert await relay.prune() == (3, 0, 0)
    assert await relay.prune() == (0, 0, 0)
    assert store.prunes == [2 * 86400] and store.deletes == []
    keep = OutboxRelay(None, store, interval_s=1, grace_s=1)  # type: ignore[arg-type]
    assert await keep.prune() == (0, 0, 0) and len(store.prunes) == 1


async def test_the_relay_deletes_published_outbox_rows_past_their_retention() -> None:
    """With an outbox retention the same pass deletes published rows older than it, once per
    period; without one nothing is deleted."""
    from datetime import timedelta

    from consumer.relay import OutboxRelay

    store = _PruningStore()
    relay = OutboxRelay(None, store, interval_s=1, grace_s=1,  # type: ignore[arg-type]
                        recording_retention=timedelta(days=30),
                        outbox_retention=timedelta(days=7), prune_every_s=3600)
    assert await relay.prune() == (3, 5, 0)
    assert await relay.prune() == (0, 0, 0)
    assert store.deletes == [7 * 86400]


async def test_the_relay_makes_the_turn_log_s_partitions_in_its_unit() -> None:
    """The relay's pass makes the coming partitions by month unless told days."""
    from consumer.relay import OutboxRelay

    store = _PruningStore()
    await OutboxRelay(None, store, interval_s=1, grace_s=1).prune()  # type: ignore[arg-type]
    await OutboxRelay(None, store, interval_s=1, grace_s=1,  # type: ignore[arg-type]
                      turn_partition="day").prune()
    assert store.partition_units == ["month", "day"]


async def test_an_agent_that_does_not_record_saves_no_recording() -> None:
    """A turn run by an agent whose calls cannot be seen saves no recording rather than an
    empty one that would claim the turn made no model call."""
    from tests.turns.test_pipeline import FakeAgent

    store = FakeStore()
    pipeline = TurnPipeline(store=store, agent=FakeAgent(),  # type: ignore[arg-type]
                            publisher=OutboxPublisher(store, FakeProducer()),  # type: ignore[arg-type]
                            topics=OutboundTopics(messages="m", schedule="s"),
                            recording="envelopes")
    await pipeline.apply(_work("s-1", "order please", 1))
    turn = store.saves[0].turn
    assert turn.model_calls is None and turn.clock_at is None and turn.llm_calls == 1
