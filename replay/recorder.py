"""Recording a conversation without the service: run inputs through an agent as the service
would, and keep what its turn log would hold (inputs, clock, model calls, results).

For golden files written from scripted inputs (no database needed), for tests and for the
benchmark. Each input is ``(at, spec)``: the time the turn runs at and the turn request's
input fields. A wake may name its key or, as ``{"wake": n}``, the n-th wake the conversation
has scheduled so far (0-based), so scripts need not know how keys are spelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from engine import Agent, FakeClock
from engine.clock import to_utc
from engine.recording import RecordingLevel, fields_written, recorded_agent, taping
from replay.conversations import Conversation, RecordedTurn
from replay.runner import HISTORY_LIMIT, _history_entries, as_recorded

__all__ = ["record_conversation"]


async def record_conversation(
    agent: Agent,
    session_id: str,
    inputs: Sequence[tuple[datetime | str, dict[str, Any]]],
    *,
    level: RecordingLevel = "envelopes",
    history_limit: int = HISTORY_LIMIT,
) -> Conversation:
    """The conversation ``inputs`` make with ``agent`` (its own provider answering)."""
    if not inputs:
        return Conversation(session_id=session_id, turns=[])
    clock = FakeClock(inputs[0][0])
    recording = recorded_agent(agent.replaced(clock=clock))
    state: dict[str, Any] | None = None
    history: list[dict[str, Any]] = []
    wakes: list[str] = []
    turns: list[RecordedTurn] = []
    for version, (at, spec) in enumerate(inputs, start=1):
        clock.set(at)
        given = dict(spec)
        if isinstance(given.get("wake"), int):
            given["wake"] = wakes[given["wake"]]
        request = {
            **given,
            "session_id": session_id,
            "session": state,
            "history": history[-history_limit:] if history_limit else [],
        }
        with taping(level) as tape:
            result = await recording.turn(request)
        after = result.session.model_dump(mode="json")
        kept = tape.to_json()
        fields = fields_written(state, after) if kept is not None else None
        turn = RecordedTurn(
            version=version,
            input={"session_id": session_id, **given},
            at=to_utc(at),
            logged_at=to_utc(at),
            calls=kept["calls"] if kept is not None else None,
            recorded=as_recorded(result, fields, kept.get("state") if kept else None),
            spoke_at=tape.spoke_at if tape.spoke_at is not None and tape.spoke_at != tape.at
            else None,
        )
        turns.append(turn)
        wakes += [entry.key for entry in result.schedule]
        state = after
        history += _history_entries(turn, turn.recorded.messages)
    return Conversation(session_id=session_id, turns=turns)
