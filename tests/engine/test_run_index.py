"""``TurnState.live`` finds runs through an index that follows every change of the run list."""

from __future__ import annotations

import asyncio

from engine import Agent, FakeClock, MockProvider
from engine.phases import load
from engine.request import TurnRequest
from engine.session import Run

START = "2026-01-05T09:00:00Z"


def test_live_follows_appends_removals_and_new_lists() -> None:
    agent = Agent(name="Ana", provider=MockProvider([]), clock=FakeClock(START), idle="silent")
    session = {
        "id": "s1",
        "v": 4,
        "runs": [
            {"id": f"r{i}", "flow_id": "f", "step_id": "a", "started_at": START}
            for i in range(3)
        ],
    }
    request = TurnRequest.parse({"session_id": "s1", "message": "oi", "session": session})
    state = asyncio.run(load.run(agent.config, request))
    runs = state.session.runs
    assert [state.live(f"r{i}") for i in range(3)] == runs
    assert state.live("r9") is None

    extra = Run(id="r9", flow_id="f", step_id="a", started_at=START)
    state.session.runs.append(extra)
    assert state.live("r9") is extra

    state.end_run(runs[1], "completed")
    assert state.live("r1") is None and state.live("r2") is runs[2]

    state.session.runs = [extra]
    assert state.live("r0") is None and state.live("r9") is extra

    twin = Run(id="r9", flow_id="g", step_id="b", started_at=START)
    state.session.runs = [extra, twin]
    assert state.live("r9") is extra  # a duplicate id finds its first run, as Session.run does
    assert state.live("r9") is state.session.run("r9")
