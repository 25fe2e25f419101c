"""The one-input pipeline against an in-memory store and producer: save, then send."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from consumer import metrics
from consumer.errors import FencedPublishError
from consumer.outbox import OutboxPublisher
from consumer.turns.decisions import VersionConflictsExhausted
from consumer.turns.parser import ParsedInput, parse_record
from consumer.turns.pipeline import (
    Admission,
    OutboundTopics,
    TurnFenced,
    TurnPipeline,
    TurnWork,
    burst_of,
    conversation_input_id,
    turn_outcome,
)
from engine import Agent, MockProvider
from engine.recording import recorded_agent
from store import SourceRecord
from tests.consumer.fakes import FakeProducer, FakeStore

TOPICS = OutboundTopics(messages="out.m", schedule="out.s")


class FakeAgent:
    """Replies ``"<n>:<message>"`` and schedules one wake; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def turn(self, request: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        state = dict(request["session"] or {"id": request["session_id"], "n": 0})
        state["n"] = state["n"] + 1
        return {
            "session": state,
            "messages": [{"kind": "ai", "text": f"{state['n']}:{request['message']}",
                          "key": f"k{state['n']}", "after_ms": 0, "run_id": "r1",
                          "step_id": "s1"}],
            "schedule": [{"key": f"w{state['n']}",
                          "at": datetime(2030, 1, 1, tzinfo=UTC), "replaces": None}],
            "outcomes": [{"code": "spoke"}],
            "llm_calls": 1,
        }


def work(text: str, offset: int, session_id: str = "s1") -> TurnWork:
    raw = f'{{"session_id": "{session_id}", "message": "{text}", "id": "{text}"}}'.encode()
    parsed = parse_record(session_id.encode(), raw, max_bytes=1000)
    assert isinstance(parsed, ParsedInput)
    return TurnWork(parsed=parsed, source=SourceRecord("in", 0, offset))


def pipeline(store: FakeStore, agent: FakeAgent, producer: FakeProducer,
             max_conflicts: int = 2) -> TurnPipeline:
    publisher = OutboxPublisher(store, producer)  # type: ignore[arg-type]
    return TurnPipeline(store=store, agent=agent, publisher=publisher,  # type: ignore[arg-type]
                        topics=TOPICS, max_version_conflicts=max_conflicts)


def sent_values(producer: FakeProducer) -> list[tuple[str, str]]:
    import json

    return [(topic, json.loads(value).get("text") or json.loads(value)["key"])
            for topic, _key, value in producer.sent]


async def test_turn_is_saved_with_its_source_then_published() -> None:
    """One input saves the session, its turn with the record's source and its outbox rows,
    then publishes reply and timer in that order with the wire fields of the spec."""
    store, agent, producer = FakeStore(), FakeAgent(), FakeProducer()
    result = await pipeline(store, agent, producer).apply(work("oi", 7))
    assert result.status == "applied" and result.version == 1
    saved = store.saves[0]
    assert saved.turn.source == SourceRecord("in", 0, 7)
    assert saved.turn.input == {"session_id": "s1", "message": "oi", "id": "oi"}
    import json

    reply = json.loads(producer.sent[0][2])
    assert reply == {"session_id": "s1", "key": "k1", "kind": "ai", "text": "1:oi",
                     "after_ms": 0, "run_id": "r1", "step_id": "s1", "input_id": "oi",
                     "version": 1}
    timer = json.loads(producer.sent[1][2])
    assert timer == {"session_id": "s1", "key": "w1", "at": "2030-01-01T00:00:00Z",
                     "replaces": None}
    assert producer.sent[0][1] == b"s1"
    assert store.published == {1, 2}


async def test_version_conflict_reloads_and_reruns() -> None:
    """Losing the version race once reruns the turn on the reloaded session and counts it."""
    store, agent, producer = FakeStore(), FakeAgent(), FakeProducer()
    store.rival_writes = 1
    before = metrics.VERSION_CONFLICTS._value.get()
    result = await pipeline(store, agent, producer).apply(work("oi", 1))
    assert agent.calls == 2
    assert result.conflicts == 1 and result.version == 2
    assert metrics.VERSION_CONFLICTS._value.get() == before + 1


async def test_version_conflicts_are_bounded() -> None:
    """A session that keeps moving under the turn gives up after the configured reruns."""
    store, agent, producer = FakeStore(), FakeAgent(), FakeProducer()
    store.rival_writes = 10
    with pytest.raises(VersionConflictsExhausted):
        await pipeline(store, agent, producer, max_conflicts=2).apply(work("oi", 1))
    assert agent.calls == 3
    assert producer.sent == []


async def test_replay_is_skipped_after_flushing_the_session_outbox() -> None:
    """A record already in the turn log does not reach the agent; the session's rows left
    unpublished by a crash go out instead."""
    store, agent, producer = FakeStore(), FakeAgent(), FakeProducer()
    await pipeline(store, agent, producer).apply(work("oi", 1))
    store.add_row("s1", "out.m", {"text": "left by a crash"})
    producer.sent.clear()
    result = await pipeline(store, agent, producer).apply(work("oi", 1))
    assert result.status == "skipped"
    assert agent.calls == 1
    assert sent_values(producer) == [("out.m", "left by a crash")]


async def test_older_unpublished_rows_go_first() -> None:
    """Publishing a session's new rows sends its older unpublished rows before them."""
    store, agent, producer = FakeStore(), FakeAgent(), FakeProducer()
    store.add_row("s1", "out.m", {"text": "older"})
    store.add_row("s2", "out.m", {"text": "other session"})
    await pipeline(store, agent, producer).apply(work("oi", 1))
    assert sent_values(producer) == [("out.m", "older"), ("out.m", "1:oi"), ("out.s", "w1")]


async def test_a_turn_costs_a_load_a_save_and_a_mark() -> None:
    """With nothing of the session unpublished, a turn loads (replay check included), saves,
    then publishes its rows as one batch and marks them with one call: no fetch, no check of
    its own."""
    store, agent, producer = FakeStore(), FakeAgent(), FakeProducer()
    turns = pipeline(store, agent, producer)
    await turns.apply(work("oi", 1))
    await turns.apply(work("de novo", 2))
    assert store.calls == ["load", "save_turn", "mark_published"] * 2
    assert sent_values(producer) == [("out.m", "1:oi"), ("out.s", "w1"),
                                     ("out.m", "2:de novo"), ("out.s", "w2")]
    assert store.published == {1, 2, 3, 4}


class Bracket:
    """``before_turn`` and ``after_turn`` that note what the store and the agent had done at
    each call, as the consumer's turn slot would be taken and given back."""

    def __init__(self, store: FakeStore, agent: FakeAgent, *, allow: list[bool] | None = None):
        self.store, self.agent = store, agent
        self.allow = allow
        self.seen: list[tuple[str, list[str], int]] = []

    async def before_turn(self, route: object) -> Admission:
        self.seen.append(("take", list(self.store.calls), self.agent.calls))
        return Admission(self.allow.pop(0) if self.allow else True)

    def after_turn(self) -> None:
        self.seen.append(("give", list(self.store.calls), self.agent.calls))


async def test_the_slot_brackets_the_engine_turn_alone() -> None:
    """The caller's turn slot is taken after the load and given back as soon as the engine
    turn returns: the save and the publish run without it."""
    store, agent, producer = FakeStore(), FakeAgent(), FakeProducer()
    slot = Bracket(store, agent)
    result = await pipeline(store, agent, producer).apply(
        work("oi", 1), before_turn=slot.before_turn, after_turn=slot.after_turn
    )
    assert result.status == "applied"
    assert slot.seen == [("take", ["load"], 0), ("give", ["load"], 1)]
    assert store.calls == ["load", "save_turn", "mark_published"]


async def test_a_version_conflict_takes_the_slot_again_for_the_rerun() -> None:
    """A rerun after a version conflict is another engine turn: it takes a slot again after
    its reload, and gives it back before its save, like the first."""
    store, agent, producer = FakeStore(), FakeAgent(), FakeProducer()
    store.rival_writes = 1
    slot = Bracket(store, agent)
    result = await pipeline(store, agent, producer).apply(
        work("oi", 1), before_turn=slot.before_turn, after_turn=slot.after_turn
    )
    assert result.status == "applied" and result.conflicts == 1
    assert slot.seen == [
        ("take", ["load"], 0),
        ("give", ["load"], 1),
        ("take", ["load", "save_turn", "load"], 1),
        ("give", ["load", "save_turn", "load"], 2),
    ]


async def test_a_rerun_fenced_while_it_waited_for_its_slot_saves_nothing() -> None:
    """If the partition moved while a rerun waited for its slot, the rerun does not run:
    ``TurnFenced``, the lost first save stays lost, nothing is published."""
    store, agent, producer = FakeStore(), FakeAgent(), FakeProducer()
    store.rival_writes = 1
    slot = Bracket(store, agent, allow=[True, False])
    with pytest.raises(TurnFenced):
        await pipeline(store, agent, producer).apply(
            work("oi", 1), before_turn=slot.before_turn, after_turn=slot.after_turn
        )
    assert agent.calls == 1
    assert [kind for kind, *_ in slot.seen] == ["take", "give", "take"]
    assert store.saves == [] and producer.sent == []


async def test_a_turn_that_raises_gives_its_slot_back() -> None:
    """An engine turn that raises still calls ``after_turn``, once, and saves nothing."""
    store, producer = FakeStore(), FakeProducer()

    class Broken(FakeAgent):
        async def turn(self, request: dict[str, Any]) -> dict[str, Any]:
            self.calls += 1
            raise RuntimeError("model down")

    agent = Broken()
    slot = Bracket(store, agent)
    with pytest.raises(RuntimeError, match="model down"):
        await pipeline(store, agent, producer).apply(
            work("oi", 1), before_turn=slot.before_turn, after_turn=slot.after_turn
        )
    assert slot.seen == [("take", ["load"], 0), ("give", ["load"], 1)]
    assert store.saves == []


async def test_a_fenced_before_turn_runs_nothing_and_saves_nothing() -> None:
    """``before_turn`` answering False (the partition moved while the input waited for its
    slot) raises ``TurnFenced``: no turn, no save, nothing published."""
    store, agent, producer = FakeStore(), FakeAgent(), FakeProducer()

    async def fenced(route: object) -> Admission:
        return Admission(False)

    with pytest.raises(TurnFenced):
        await pipeline(store, agent, producer).apply(work("oi", 1), before_turn=fenced)
    assert agent.calls == 0
    assert store.calls == ["load"]
    assert store.saves == [] and producer.sent == []


async def test_a_replay_skipped_at_the_load_never_awaits_before_turn() -> None:
    """A replayed record needs no turn slot: it is skipped at the load."""
    store, agent, producer = FakeStore(), FakeAgent(), FakeProducer()
    await pipeline(store, agent, producer).apply(work("oi", 1))
    awaited: list[bool] = []

    async def before_turn(route: object) -> Admission:
        awaited.append(True)
        return Admission(True)

    result = await pipeline(store, agent, producer).apply(work("oi", 1), before_turn=before_turn)
    assert result.status == "skipped"
    assert awaited == []


async def test_a_replay_with_nothing_unpublished_costs_one_load() -> None:
    """A replayed record whose session has no unpublished rows is skipped after the load alone."""
    store, agent, producer = FakeStore(), FakeAgent(), FakeProducer()
    await pipeline(store, agent, producer).apply(work("oi", 1))
    store.calls.clear()
    result = await pipeline(store, agent, producer).apply(work("oi", 1))
    assert result.status == "skipped"
    assert store.calls == ["load"]
    assert agent.calls == 1


async def test_fenced_consumer_saves_but_does_not_publish() -> None:
    """When the partition is no longer ours the turn stays saved and unpublished."""
    store, agent, producer = FakeStore(), FakeAgent(), FakeProducer()
    with pytest.raises(FencedPublishError):
        await pipeline(store, agent, producer).apply(work("oi", 1), may_publish=lambda: False)
    assert producer.sent == []
    assert await store.outbox_backlog() == 2


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"messages": [{"text": "x"}], "outcomes": [{"code": "spoke"}]}, "answered"),
        # A flow handing over to another flow is no hand-off to a person.
        ({"messages": [{"kind": "ai"}], "outcomes": [{"code": "handoff"}]}, "answered"),
        ({"messages": [], "outcomes": [{"code": "handoff"}]}, None),
        ({"messages": [{"kind": "handoff", "text": "x"}]}, "handoff"),
        # A finished flow is no completed task; a failed action is the flow's own business.
        ({"messages": [], "ended": [{"reason": "completed"}]}, None),
        ({"messages": [{"kind": "verbatim"}], "ended": [{"reason": "completed"}]}, "answered"),
        ({"messages": [], "outcomes": [{"code": "action-failed"}]}, None),
        ({"messages": [{}], "outcomes": [{"code": "fallback-sent"}]}, "answered"),
        ({"messages": [], "outcomes": [{"code": "duplicate-input"}]}, None),
        ({"messages": [{}], "outcome": "handoff"}, "handoff"),
        ({"messages": [{}], "turn_outcome": "fallback"}, "fallback"),
    ],
)
def test_turn_outcome_labels(result: dict[str, Any], expected: str | None) -> None:
    """The turn outcome is what the turn reported: a stated outcome, else a hand-off message,
    else answered when it replied; nothing is guessed from outcome codes or flow ends."""
    assert turn_outcome(result) == expected


async def test_an_input_id_seen_long_ago_is_skipped_at_a_new_offset() -> None:
    """The same message id re-produced at a later offset, after many other inputs, does not
    reach the agent; the session's unpublished rows are flushed as for a replay."""
    store, agent, producer = FakeStore(), FakeAgent(), FakeProducer()
    turns = pipeline(store, agent, producer)
    await turns.apply(work("first", 1))
    for n in range(60):
        await turns.apply(work(f"later-{n}", 2 + n))
    store.add_row("s1", "out.m", {"text": "left by a crash"})
    producer.sent.clear()
    before = metrics.OUTCOMES.labels(code="duplicate-input")._value.get()
    result = await turns.apply(work("first", 500))
    assert result.status == "duplicate"
    assert agent.calls == 61
    assert sent_values(producer) == [("out.m", "left by a crash")]
    assert metrics.OUTCOMES.labels(code="duplicate-input")._value.get() == before + 1


async def test_the_same_input_id_in_two_conversations_is_answered_in_both() -> None:
    """Input ids are per conversation: two sessions may both send id "first"."""
    store, agent, producer = FakeStore(), FakeAgent(), FakeProducer()
    turns = pipeline(store, agent, producer)
    one = await turns.apply(work("first", 1, "s1"))
    two = await turns.apply(work("first", 2, "s2"))
    assert (one.status, two.status) == ("applied", "applied")
    assert [r.turn.input_id for r in store.saves] == ["first", "first"]


async def test_a_duplicate_that_wins_no_load_race_is_refused_at_save() -> None:
    """When a copy of the input is saved between this turn's load and save, the save's unique
    check turns it into a skipped duplicate and nothing of it is published."""
    store, agent, producer = FakeStore(), FakeAgent(), FakeProducer()
    turns = pipeline(store, agent, producer)
    load = store.load

    async def racing_load(session_id: str, **kwargs: Any) -> Any:
        loaded = await load(session_id, **kwargs)
        store.input_ids.add((session_id, "oi"))  # a copy at another offset saved meanwhile
        return loaded

    store.load = racing_load  # type: ignore[method-assign]
    result = await turns.apply(work("oi", 9))
    assert result.status == "duplicate"
    assert store.saves == [] and producer.sent == []


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        ({"message": "x", "id": "m1"}, "m1"),
        ({"message": "x"}, None),
        ({"message": "x", "id": ""}, None),
        ({"wake": "k"}, None),
        ({"event": "paid", "key": "e1"}, "event:e1"),
        ({"start": {"flow": "f", "key": "s1"}}, "start:s1"),
    ],
)
def test_conversation_input_ids(request_: dict[str, Any], expected: str | None) -> None:
    """Message ids, event keys and start keys dedupe a conversation's inputs; wakes do not."""
    assert conversation_input_id(request_) == expected


async def test_a_bursts_recording_keeps_its_failed_attempts_and_its_wait_for_a_slot() -> None:
    """A burst of two messages that failed once and then waited for its turn slot is answered
    as one turn whose recording keeps both: the failed attempt (``retries``) and the slot's
    wait (``queued``, as ``before_turn`` reported it); the work given is never changed."""
    store, producer = FakeStore(), FakeProducer()
    agent = recorded_agent(Agent(name="A", provider=MockProvider(["ok"] * 4), idle="Answer."))
    waited = {"waited_ms": 12, "plan": "free", "why": ["plan-cap"]}
    retries = {"attempts": 1, "last_error": "TimeoutError", "waited_ms": 40}

    async def before_turn(route: object) -> Admission:
        return Admission(True, waited)

    given = dataclasses.replace(
        burst_of([work("one", 1), work("two", 2)]), retries=retries
    )
    publisher = OutboxPublisher(store, producer)  # type: ignore[arg-type]
    burst_pipeline = TurnPipeline(store=store, agent=agent, publisher=publisher,  # type: ignore[arg-type]
                                  topics=TOPICS, recording="envelopes")
    await burst_pipeline.apply(given, before_turn=before_turn)
    [saved] = store.saves
    delivery = saved.turn.model_calls["delivery"]
    assert (delivery["retries"], delivery["queued"]) == (retries, waited)
    assert [p.source.offset for p in given.parts] == [1, 2] and given.queued is None
