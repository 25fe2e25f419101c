"""A flow move (``then: {"flow": ...}``) to a flow that already has a live run starts no second
run: one run of a flow at a time, as for a routed message or a host start. A second run would
wait beside the first and one event would move both: one payment confirming two bookings."""

from __future__ import annotations

import asyncio
from typing import Any

from engine import FakeClock, TurnResult
from tests.scenarios.support import START, code_only_agent, texts

FLOWS: list[dict[str, Any]] = [
    # Started by the host; hands over to the booking.
    {"id": "welcome", "steps": [{"id": "hi", "say": "Hi!", "then": {"flow": "booking"}}]},
    {"id": "booking", "steps": [
        {"id": "booked", "say": "Booked."},
        {"id": "pay", "wait": {"event": "paid", "up_to_ms": 600000}, "then": "paid"},
        {"id": "paid", "say": "Payment received.", "then": "end"},
    ]},
]


def _start(session: Any, flow: str, key: str) -> dict[str, Any]:
    return {"start": {"flow": flow, "key": key}, "session": session}


async def _conversation(agent: Any, session_id: str) -> list[TurnResult]:
    """Book, hand over to the booking again while it waits, then pay once."""
    results: list[TurnResult] = []
    session: Any = None
    for request in (_start(None, "booking", "b1"), {"start": {"flow": "welcome", "key": "w1"}},
                    {"event": "paid", "payload": {}, "key": "p1"}):
        request = {**request, "session_id": session_id, "session": session}
        result = await agent.turn(request)
        results.append(result)
        session = result.session.model_dump(mode="json")
    return results


async def test_a_hand_over_to_a_waiting_flow_starts_no_second_run() -> None:
    agent, _, _ = code_only_agent(FLOWS, clock=FakeClock(START), events={"paid": {}})
    booked, handed, paid = await _conversation(agent, "s1")
    assert texts(booked) == ["Booked."]
    assert texts(handed) == ["Hi!"]  # no second "Booked."
    assert [(s.flow_id, s.code) for s in handed.skipped] == [("booking", "already-running")]
    assert [r.flow_id for r in handed.session.runs] == ["booking"]
    assert texts(paid) == ["Payment received."]  # one run waited, one confirmation
    assert paid.session.runs == [] and paid.llm_calls == 0


async def test_many_conversations_each_confirm_their_one_payment_once() -> None:
    """Forty conversations at once on one agent: each ends with exactly one booking and one
    confirmation, and no run of one conversation is in another's session."""
    agent, _, _ = code_only_agent(FLOWS, clock=FakeClock(START), events={"paid": {}})
    sessions = [f"s-{n}" for n in range(40)]
    every = await asyncio.gather(*(_conversation(agent, s) for s in sessions))
    for session_id, (booked, handed, paid) in zip(sessions, every, strict=True):
        assert texts(booked) + texts(handed) + texts(paid) == [
            "Booked.", "Hi!", "Payment received."]
        assert handed.session.id == session_id
        assert all(run.id.endswith(session_id) or "@" not in run.id
                   for run in handed.session.runs)
        assert paid.session.runs == []


async def test_a_flow_may_still_hand_over_to_itself() -> None:
    """The handing-over run ends first: a flow that restarts itself is not its own live run."""
    again = [{"id": "again", "steps": [
        {"id": "x", "say": "Again", "then": {"flow": "again"}}]}]
    agent, _, _ = code_only_agent(again, clock=FakeClock(START))
    result = await agent.turn({"session_id": "s1", **_start(None, "again", "k")})
    assert texts(result).count("Again") == 6  # up to the hop limit, as before
