"""Seed 000, phases 1 (Load) and 2 (Ingest): every input kind, spending no model call."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from engine import FakeClock, Session, TurnRequest, migrate_session
from tests.scenarios.support import code_only_agent, codes, saved, texts

GREETER = {
    "id": "greet",
    "on": [{"message": []}],
    "steps": [{"id": "hello", "say": "Oi!"}],
}

WAITER = {
    "id": "follow",
    "on": [{"message": []}],
    "steps": [
        {"id": "ask", "say": "Posso ajudar?"},
        {"id": "wait", "wait": {"ms": 3_600_000}, "else": "answered"},
        {"id": "nudge", "say": "Ainda por aí?", "then": "end"},
        {"id": "answered", "say": "Que bom que respondeu."},
    ],
}


async def test_fresh_session_shape() -> None:
    """No session means a fresh one: { id: sessionId, v: 4, version: 0, data: {}, runs: [],
    claims: {}, inputs: [], metadata: {} }."""
    agent, provider, _ = code_only_agent([])
    result = await agent.turn(
        {"session_id": "s1", "event": "nothing", "key": "e1", "direction": "outbound"}
    )
    session = saved(result)
    assert {
        k: session[k] for k in ("id", "v", "version", "data", "runs", "claims", "metadata")
    } == {
        "id": "s1",
        "v": 4,
        "version": 0,
        "data": {},
        "runs": [],
        "claims": {},
        "metadata": {},
    }
    assert result.llm_calls == 0 and provider.calls == []


async def test_now_comes_from_the_agent_clock() -> None:
    """now comes from the agent's clock (default: the system time)."""
    clock = FakeClock("2030-02-03T04:05:06Z")
    agent, _, _ = code_only_agent([GREETER], clock=clock)
    result = await agent.turn({"session_id": "s1", "message": "oi"})
    assert result.session.last_user_at == datetime(2030, 2, 3, 4, 5, 6, tzinfo=UTC)
    assert result.session.last_assistant_at == datetime(2030, 2, 3, 4, 5, 6, tzinfo=UTC)
    assert result.llm_calls == 0


async def test_session_and_input_are_never_mutated() -> None:
    """The session you passed is deep-copied; the input is never mutated."""
    agent, _, _ = code_only_agent([WAITER])
    first = await agent.turn({"session_id": "s1", "message": "oi", "id": "m1"})
    stored = saved(first)
    request: dict[str, Any] = {
        "session_id": "s1",
        "message": "voltei",
        "id": "m2",
        "session": stored,
        "context": {"a": [1]},
    }
    before = copy.deepcopy(request)
    result = await agent.turn(request)
    assert request == before
    session_obj = migrate_session(stored)
    snapshot = session_obj.model_dump(mode="json")
    typed = TurnRequest(session_id="s1", message="x", id="m3", session=session_obj)
    await agent.turn(typed)
    assert session_obj.model_dump(mode="json") == snapshot
    assert result.llm_calls == 0


async def test_wake_without_session_does_nothing() -> None:
    """A wake with no session does nothing: outcome code: 'no-session', changed: false."""
    agent, _, _ = code_only_agent([GREETER])
    result = await agent.turn({"session_id": "s1", "wake": "r1:wait:2"})
    assert codes(result) == ["no-session"]
    assert result.changed is False and result.messages == [] and result.llm_calls == 0


async def test_duplicate_message_id_is_dropped() -> None:
    """An id the session already saw (it keeps the last 50) is dropped: code:
    'duplicate-input', changed: false."""
    agent, _, _ = code_only_agent([GREETER])
    first = await agent.turn({"session_id": "s1", "message": "oi", "id": "m1"})
    again = await agent.turn(
        {"session_id": "s1", "message": "oi", "id": "m1", "session": saved(first)}
    )
    assert codes(again) == ["duplicate-input"]
    assert again.changed is False and again.messages == [] and again.llm_calls == 0
    assert saved(again) == saved(first)


async def test_only_the_last_50_ids_are_kept() -> None:
    """An id the session already saw (it keeps the last 50) is dropped."""
    agent, _, _ = code_only_agent([GREETER])
    stored: dict[str, Any] | None = None
    for i in range(51):
        result = await agent.turn(
            {"session_id": "s1", "message": "oi", "id": f"m{i}", "session": stored}
        )
        stored = saved(result)
    assert stored is not None and len(stored["inputs"]) == 50 and "m0" not in stored["inputs"]
    old = await agent.turn({"session_id": "s1", "message": "oi", "id": "m0", "session": stored})
    assert old.changed is True and "duplicate-input" not in codes(old)
    recent = await agent.turn({"session_id": "s1", "message": "oi", "id": "m50", "session": stored})
    assert codes(recent) == ["duplicate-input"] and recent.llm_calls == 0


async def test_message_sets_last_user_at_from_at() -> None:
    """Otherwise the id is recorded and lastUserAt is set to at (or now)."""
    agent, _, _ = code_only_agent([GREETER])
    result = await agent.turn(
        {"session_id": "s1", "message": "oi", "id": "m1", "at": "2026-01-05T08:59:00Z"}
    )
    assert result.session.last_user_at == datetime(2026, 1, 5, 8, 59, tzinfo=UTC)
    assert result.session.inputs == ["m1"]
    assert result.llm_calls == 0


async def test_reply_takes_the_timer_else() -> None:
    """Every run parked on a timer wait with an else takes that else, in the order the runs
    started: the customer replied before the timer ran out. Outcome code: 'replied'."""
    agent, _, _ = code_only_agent([WAITER])
    first = await agent.turn({"session_id": "s1", "message": "oi", "id": "m1"})
    assert first.session.runs[0].status == "waiting"
    reply = await agent.turn(
        {"session_id": "s1", "message": "sim", "id": "m2", "session": saved(first)}
    )
    assert codes(reply)[0] == "replied"
    assert texts(reply) == ["Que bom que respondeu."]
    assert reply.session.runs == [] and reply.llm_calls == 0


async def test_timer_wake_means_no_reply() -> None:
    """That run goes back to running, and its step says what the wake means: code:
    'no-reply' on a timer wait."""
    agent, _, clock = code_only_agent([WAITER])
    first = await agent.turn({"session_id": "s1", "message": "oi", "id": "m1"})
    (entry,) = first.schedule
    assert entry.at == clock.now() + timedelta(hours=1)
    clock.advance(3600)
    woke = await agent.turn({"session_id": "s1", "wake": entry.key, "session": saved(first)})
    assert codes(woke)[0] == "no-reply"
    assert texts(woke) == ["Ainda por aí?"] and woke.llm_calls == 0


async def test_event_wait_timeout_means_no_event() -> None:
    """code: 'no-event' on an event wait."""
    flow = {
        "id": "book",
        "on": [{"message": []}],
        "steps": [
            {
                "id": "wait",
                "wait": {"event": "booked", "up_to_ms": 60_000},
                "then": "yay",
                "else": "late",
            },
            {"id": "yay", "say": "Agendado!", "then": "end"},
            {"id": "late", "say": "Não vi o agendamento.", "then": "end"},
        ],
    }
    agent, _, _ = code_only_agent([flow], events={"booked": {}}, idle="silent")
    first = await agent.turn({"session_id": "s1", "message": "oi"})
    woke = await agent.turn(
        {"session_id": "s1", "wake": first.schedule[0].key, "session": saved(first)}
    )
    assert codes(woke)[0] == "no-event" and texts(woke) == ["Não vi o agendamento."]
    assert woke.llm_calls == 0


async def test_event_wait_defaults_to_30_days() -> None:
    """Wait (event). Parks until the event arrives or upTo passes (default 30 days)."""
    flow = {
        "id": "book",
        "on": [{"message": []}],
        "steps": [{"id": "wait", "wait": {"event": "booked"}}],
    }
    agent, _, clock = code_only_agent([flow], events={"booked": {}}, idle="silent")
    first = await agent.turn({"session_id": "s1", "message": "oi"})
    assert first.schedule[0].at == clock.now() + timedelta(days=30)
    assert first.session.runs[0].waiting is not None
    assert first.session.runs[0].waiting.event == "booked" and first.llm_calls == 0


async def test_stale_wake() -> None:
    """No such run: code: 'stale-wake', changed: false."""
    agent, _, _ = code_only_agent([WAITER])
    first = await agent.turn({"session_id": "s1", "message": "oi", "id": "m1"})
    replied = await agent.turn(
        {"session_id": "s1", "message": "sim", "id": "m2", "session": saved(first)}
    )
    late = await agent.turn(
        {"session_id": "s1", "wake": first.schedule[0].key, "session": saved(replied)}
    )
    assert codes(late) == ["stale-wake"] and late.changed is False and late.llm_calls == 0
    assert saved(late) == saved(replied)


async def test_inbound_event_resolves_reply_waits_and_sets_last_user_at() -> None:
    """An inbound event counts as the customer speaking: it sets lastUserAt and resolves reply
    waits like a message."""
    agent, _, clock = code_only_agent([WAITER])
    first = await agent.turn({"session_id": "s1", "message": "oi", "id": "m1"})
    clock.advance(60)
    event = await agent.turn(
        {"session_id": "s1", "event": "clicked", "key": "e1", "session": saved(first)}
    )
    assert event.session.last_user_at == clock.now()
    assert codes(event)[0] == "replied" and texts(event) == ["Que bom que respondeu."]
    assert event.llm_calls == 0


async def test_outbound_event_sets_last_assistant_at() -> None:
    """An outbound one counts as the assistant speaking and sets lastAssistantAt."""
    agent, _, clock = code_only_agent([WAITER])
    first = await agent.turn({"session_id": "s1", "message": "oi", "id": "m1"})
    clock.advance(60)
    event = await agent.turn(
        {
            "session_id": "s1",
            "event": "sent_by_agent",
            "key": "e1",
            "direction": "outbound",
            "session": saved(first),
        }
    )
    assert event.session.last_assistant_at == clock.now()
    assert event.session.runs[0].status == "waiting"  # an outbound event is no reply
    assert event.llm_calls == 0


async def test_event_wait_takes_then() -> None:
    """Every run parked on wait: { event } for this name takes then (code: 'event-arrived')."""
    flow = {
        "id": "book",
        "on": [{"message": []}],
        "steps": [
            {"id": "wait", "wait": {"event": "booked"}, "then": "yay", "else": "late"},
            {"id": "yay", "say": "Agendado!", "then": "end"},
            {"id": "late", "say": "Não vi.", "then": "end"},
        ],
    }
    agent, _, _ = code_only_agent([flow], events={"booked": {}, "other": {}}, idle="silent")
    first = await agent.turn({"session_id": "s1", "message": "oi"})
    other = await agent.turn(
        {
            "session_id": "s1",
            "event": "other",
            "key": "e0",
            "direction": "outbound",
            "session": saved(first),
        }
    )
    assert other.session.runs[0].status == "waiting"
    arrived = await agent.turn(
        {
            "session_id": "s1",
            "event": "booked",
            "key": "e1",
            "direction": "outbound",
            "session": saved(first),
        }
    )
    assert "event-arrived" in codes(arrived) and texts(arrived) == ["Agendado!"]
    assert arrived.llm_calls == 0


async def test_event_trigger_starts_with_payload_as_input() -> None:
    """Then every flow with a matching event trigger goes through the start checks; the payload
    becomes the run's input."""
    flow = {
        "id": "paid",
        "on": [{"event": "payment", "if": {"not": {"known": "nome"}}}],
        "steps": [{"id": "thanks", "say": "Recebemos R$ {{input.amount}}."}],
    }
    agent, _, _ = code_only_agent([flow], events={"payment": {}})
    result = await agent.turn(
        {"session_id": "s1", "event": "payment", "key": "p1", "payload": {"amount": 30}}
    )
    assert texts(result) == ["Recebemos R$ 30."]
    assert [s.flow_id for s in result.started] == ["paid"] and result.llm_calls == 0
    blocked = await agent.turn(
        {
            "session_id": "s1",
            "event": "payment",
            "key": "p2",
            "payload": {"amount": 30},
            "session": {**saved(result), "data": {"nome": "Ana"}},
        }
    )
    assert [(s.flow_id, s.code) for s in blocked.skipped] == [("paid", "if-false")]


async def test_event_trigger_after_parks_the_run() -> None:
    """after parks the new run before its first step (code: 'awaiting-trigger')."""
    flow = {
        "id": "paid",
        "on": [{"event": "payment", "after_ms": 120_000}],
        "steps": [{"id": "thanks", "say": "Obrigado!"}],
    }
    agent, _, clock = code_only_agent([flow], events={"payment": {}})
    parked = await agent.turn({"session_id": "s1", "event": "payment", "key": "p1"})
    assert "awaiting-trigger" in codes(parked) and parked.messages == []
    (entry,) = parked.schedule
    assert entry.at == clock.now() + timedelta(minutes=2)
    clock.advance(120)
    woke = await agent.turn({"session_id": "s1", "wake": entry.key, "session": saved(parked)})
    assert texts(woke) == ["Obrigado!"] and woke.llm_calls == 0


async def test_start_input_runs_the_named_flow() -> None:
    """Start. The named flow goes through the start checks with the host's key and input."""
    flow = {
        "id": "promo",
        "repeat": "once",
        "steps": [{"id": "offer", "say": "Oferta para {{input.who}}"}],
    }
    agent, _, _ = code_only_agent([flow])
    started = await agent.turn(
        {"session_id": "s1", "start": {"flow": "promo", "input": {"who": "Ana"}, "key": "k1"}}
    )
    assert texts(started) == ["Oferta para Ana"] and started.llm_calls == 0
    again = await agent.turn(
        {"session_id": "s1", "session": saved(started), "start": {"flow": "promo", "key": "k2"}}
    )
    assert [(s.flow_id, s.code) for s in again.skipped] == [("promo", "repeat-once")]
    replay = await agent.turn(
        {"session_id": "s1", "session": saved(started), "start": {"flow": "promo", "key": "k1"}}
    )
    assert codes(replay) == ["duplicate-input"] and replay.changed is False


async def test_start_of_unknown_flow_is_flow_gone() -> None:
    """A flow the agent does not have leaves code: 'flow-gone' in skipped."""
    agent, _, _ = code_only_agent([GREETER])
    result = await agent.turn({"session_id": "s1", "start": {"flow": "nope", "key": "k"}})
    assert [(s.flow_id, s.code) for s in result.skipped] == [("nope", "flow-gone")]
    assert result.changed is True and result.llm_calls == 0


async def test_cooldown_blocks_a_second_start() -> None:
    """The start checks: repeat with a cooldown blocks a start until it passes."""
    flow = {
        "id": "promo",
        "repeat": {"cooldown_ms": 60_000},
        "steps": [{"id": "offer", "say": "Oferta"}],
    }
    agent, _, clock = code_only_agent([flow])
    first = await agent.turn({"session_id": "s1", "start": {"flow": "promo", "key": "k1"}})
    clock.advance(30)
    early = await agent.turn(
        {"session_id": "s1", "session": saved(first), "start": {"flow": "promo", "key": "k2"}}
    )
    assert [s.code for s in early.skipped] == ["cooldown"]
    clock.advance(31)
    late = await agent.turn(
        {"session_id": "s1", "session": saved(first), "start": {"flow": "promo", "key": "k3"}}
    )
    assert texts(late) == ["Oferta"] and late.llm_calls == 0


async def test_wake_takes_the_floor_and_skips_routing() -> None:
    """A run that takes or resumes the floor here (a resolved wait, a wake) makes phase 4 skip
    routing: the customer is answering that run."""
    catch_all = {"id": "other", "on": [{"message": []}], "steps": [{"id": "x", "say": "catch-all"}]}
    starter = {"id": "follow", **{k: v for k, v in WAITER.items() if k != "id"}, "on": []}
    agent, _, _ = code_only_agent([starter, catch_all])
    first = await agent.turn({"session_id": "s1", "start": {"flow": "follow", "key": "k"}})
    reply = await agent.turn({"session_id": "s1", "message": "sim", "session": saved(first)})
    assert texts(reply) == ["Que bom que respondeu."]
    assert [s.flow_id for s in reply.started] == [] and reply.llm_calls == 0


async def test_migrated_session_round_trips() -> None:
    """A session saved by 3.x is the host's job: run migrateSession where you deserialize."""
    agent, _, _ = code_only_agent([WAITER])
    result = await agent.turn({"session_id": "s1", "message": "oi", "id": "m1"})
    dump = saved(result)
    assert migrate_session(dump).model_dump(mode="json") == dump
    old = {
        "id": "s1",
        "v": 3,
        "data": {"nome": "Ana"},
        "lastUserAt": "2026-01-01T00:00:00Z",
        "claims": {"promo": "2026-01-01T00:00:00Z"},
        "runs": [
            {
                "id": "r9",
                "flowId": "follow",
                "stepId": "wait",
                "status": "waiting",
                "startedAt": "2026-01-01T00:00:00Z",
                "waiting": {"key": "r9:wait:1", "kind": "timer"},
            }
        ],
    }
    upgraded = migrate_session(old)
    assert isinstance(upgraded, Session) and upgraded.v == 4
    assert upgraded.runs[0].flow_id == "follow" and "flow:promo" in upgraded.claims
    assert upgraded.last_user_at == datetime(2026, 1, 1, tzinfo=UTC)
