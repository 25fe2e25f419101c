"""Corrections: a known field marked ``correctable`` may be changed by a later message.

It is offered to understand calls made anyway (never one of its own); a new valid value
replaces the old with a ``corrected`` outcome naming the field (never the value), and the
author's ``on_correction`` move (step first, then flow) sends the run where they chose.
Without ``correctable`` nothing changes: a known field stays settled.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine import Agent, FakeClock, MockProvider, TurnResult
from engine.errors import FlowConfigurationError
from tests.scenarios.support import START, codes, texts

DAYS = ["monday", "friday", "saturday"]


def fields(correctable: bool) -> dict[str, Any]:
    return {
        "service": {"type": "string"},
        "day": {"type": "string", "enum": DAYS, "correctable": correctable},
        "confirmed": {"type": "boolean", "extract": "anywhere"},
    }


def booking(step_move: Any = "summary", flow_move: Any = None) -> dict[str, Any]:
    confirm: dict[str, Any] = {"id": "confirm", "collect": ["confirmed"]}
    if step_move is not None:
        confirm["on_correction"] = step_move
    flow: dict[str, Any] = {
        "id": "booking",
        "on": [{"message": ["book"]}],
        "steps": [
            {"id": "what", "collect": ["service", "day"]},
            {"id": "summary", "say": "So: {{service}} on {{day}}. Shall I book it?"},
            confirm,
            {"id": "done", "say": "Booked for {{day}}."},
        ],
    }
    if flow_move is not None:
        flow["on_correction"] = flow_move
    return flow


def build(provider: MockProvider, *, correctable: bool = True, **flow: Any) -> Agent:
    return Agent(
        name="Ana", provider=provider, clock=FakeClock(START), fields=fields(correctable),
        flows=[booking(**flow)], idle="silent",
    )


def known(session_id: str = "s1") -> dict[str, Any]:
    return {"id": session_id, "v": 4, "version": 0, "data": {"service": "tune-up", "day":
            "friday"}, "runs": [], "claims": {}, "inputs": [], "metadata": {}}


async def confirming(agent: Agent, session_id: str = "s1") -> TurnResult:
    """The booking starts with service and day known and asks for the confirmation."""
    first = await agent.turn({"session_id": session_id, "message": "book", "id": "m1",
                              "session": known(session_id)})
    (run,) = first.session.runs
    assert (run.step_id, run.status) == ("confirm", "asking")
    return first


def test_a_correction_during_confirmation_replaces_the_value_and_reconfirms() -> None:
    """"Actually saturday" at the confirm step: day becomes saturday (outcome corrected, the
    field named, not the value), and the run goes back to the summary with the new day."""
    provider = MockProvider([
        {"fields": {"confirmed": None}},
        {"message": "Please confirm.", "confirmed": None},
        {"fields": {"confirmed": None, "day": "saturday"}},
        {"message": "Is that right?", "confirmed": None},
    ])
    agent = build(provider)

    async def go() -> TurnResult:
        first = await confirming(agent)
        return await agent.turn({"session_id": "s1", "message": "actually saturday",
                                 "id": "m2", "session": first.session})

    second = asyncio.run(go())
    understand = provider.calls[2]
    assert understand.schema_name == "understand"
    assert "day" in understand.json_schema["properties"]["fields"]["properties"]
    assert understand.meta["corrections"] == ["day"]
    assert "already known: 'friday'" in understand.system
    assert second.session.data["day"] == "saturday"
    corrected = [o for o in second.outcomes if o.code == "corrected"]
    assert [o.detail for o in corrected] == ["day"]
    assert all("saturday" not in (o.detail or "") for o in second.outcomes)
    assert "So: tune-up on saturday. Shall I book it?" in texts(second)
    (run,) = second.session.runs
    assert (run.step_id, run.status) == ("confirm", "asking")
    assert len(provider.calls) == 4  # this turn: the usual understand + speak, no extra call


def test_without_correctable_a_known_field_stays_settled() -> None:
    """The same message with the default spec: day is not offered and stays friday."""
    provider = MockProvider([
        {"fields": {"confirmed": None}},
        {"message": "Please confirm.", "confirmed": None},
        {"fields": {"confirmed": None}},
        {"message": "Please confirm.", "confirmed": None},
    ])
    agent = build(provider, correctable=False)

    async def go() -> TurnResult:
        first = await confirming(agent)
        return await agent.turn({"session_id": "s1", "message": "actually saturday",
                                 "id": "m2", "session": first.session})

    second = asyncio.run(go())
    offered = provider.calls[2].json_schema["properties"]["fields"]["properties"]
    assert set(offered) == {"confirmed"}
    assert "corrections" not in provider.calls[2].meta
    assert second.session.data["day"] == "friday"
    assert "corrected" not in codes(second)


def test_the_same_value_again_is_no_correction() -> None:
    """A judged value equal to the known one writes nothing and moves nothing."""
    provider = MockProvider([
        {"fields": {"confirmed": None}},
        {"message": "Please confirm.", "confirmed": None},
        {"fields": {"confirmed": None, "day": "friday"}},
        {"message": "Please confirm.", "confirmed": None},
    ])
    agent = build(provider)

    async def go() -> TurnResult:
        first = await confirming(agent)
        return await agent.turn({"session_id": "s1", "message": "friday is fine",
                                 "id": "m2", "session": first.session})

    second = asyncio.run(go())
    assert "corrected" not in codes(second)
    assert not any("Shall I book it?" in t for t in texts(second))


def test_an_invalid_correction_keeps_the_old_value() -> None:
    """A value outside the enum is refused as not-in-enum; the known value stands."""
    provider = MockProvider([
        {"fields": {"confirmed": None}},
        {"message": "Please confirm.", "confirmed": None},
        {"fields": {"confirmed": None, "day": "someday"}},
        {"message": "Please confirm.", "confirmed": None},
    ])
    agent = build(provider)

    async def go() -> TurnResult:
        first = await confirming(agent)
        return await agent.turn({"session_id": "s1", "message": "someday", "id": "m2",
                                 "session": first.session})

    second = asyncio.run(go())
    assert second.session.data["day"] == "friday"
    assert "not-in-enum" in codes(second) and "corrected" not in codes(second)


def test_the_flow_on_correction_applies_when_the_step_has_none() -> None:
    """A step without on_correction takes the flow's: back to ``what`` (clearing only the
    confirmation), which has all it needs, so the run walks on to the summary again."""
    provider = MockProvider([
        {"fields": {"confirmed": None}},
        {"message": "Please confirm.", "confirmed": None},
        {"fields": {"confirmed": None, "day": "monday"}},
        {"message": "Is that right?", "confirmed": None},
    ])
    agent = build(provider, step_move=None, flow_move={"step": "what", "clear": ["confirmed"]})

    async def go() -> TurnResult:
        first = await confirming(agent)
        return await agent.turn({"session_id": "s1", "message": "monday please", "id": "m2",
                                 "session": first.session})

    second = asyncio.run(go())
    assert second.session.data["day"] == "monday"
    assert "So: tune-up on monday. Shall I book it?" in texts(second)


def test_without_on_correction_the_run_keeps_asking_with_the_new_value() -> None:
    """No move anywhere: the value changes, the run stays at its step and answers as usual."""
    provider = MockProvider([
        {"fields": {"confirmed": None}},
        {"message": "Please confirm.", "confirmed": None},
        {"fields": {"confirmed": None, "day": "monday"}},
        {"message": "Monday, confirmed?", "confirmed": None},
    ])
    agent = build(provider, step_move=None)

    async def go() -> TurnResult:
        first = await confirming(agent)
        return await agent.turn({"session_id": "s1", "message": "monday", "id": "m2",
                                 "session": first.session})

    second = asyncio.run(go())
    assert second.session.data["day"] == "monday"
    assert "corrected" in codes(second)
    assert texts(second) == ["Monday, confirmed?"]


def test_a_correctable_field_never_causes_a_call_of_its_own() -> None:
    """A floor run with nothing to judge makes no understand call, correctable or not."""
    provider = MockProvider([
        {"message": "Which service?", "service": None},
        {"message": "Which service?", "service": None},
    ])
    agent = Agent(
        name="Ana", provider=provider, clock=FakeClock(START), idle="silent",
        fields={"service": {"type": "string"},
                "day": {"type": "string", "enum": DAYS, "correctable": True}},
        flows=[{"id": "f", "on": [{"message": ["book"]}],
                "steps": [{"id": "ask", "collect": ["day", "service"]}]}],
    )

    async def go() -> TurnResult:
        session = known()
        session["data"] = {"day": "friday"}
        first = await agent.turn({"session_id": "s1", "message": "book", "id": "m1",
                                  "session": session})
        return await agent.turn({"session_id": "s1", "message": "saturday actually",
                                 "id": "m2", "session": first.session})

    asyncio.run(go())
    assert [c.schema_name for c in provider.calls] == ["speak", "speak"]


def test_on_correction_naming_an_unknown_step_is_refused() -> None:
    """A bad on_correction move fails at configuration, naming the step."""
    with pytest.raises(FlowConfigurationError, match="nowhere"):
        build(MockProvider([]), step_move="nowhere")
    with pytest.raises(FlowConfigurationError, match="nowhere"):
        build(MockProvider([]), step_move=None, flow_move="nowhere")


def test_corrections_in_many_conversations_stay_in_their_own() -> None:
    """Fifteen conversations correct their day at once to different values: each keeps its own."""
    days = ["monday", "saturday", "friday"]

    class ByMessage:
        async def generate(self, request: Any) -> Any:
            from engine import ModelResponse

            if request.schema_name == "understand":
                said = request.meta["message"].split()[-1]
                offered = request.json_schema["properties"]["fields"]["properties"]
                values = {"confirmed": None, "day": said}
                return ModelResponse(json={"fields": {k: values[k] for k in offered}})
            return ModelResponse(json={"message": "Confirm?", "confirmed": None})

    agent = Agent(name="Ana", provider=ByMessage(), clock=FakeClock(START), idle="silent",
                  fields=fields(True), flows=[booking()])

    async def one(n: int) -> TurnResult:
        first = await confirming(agent, f"s{n}")
        return await agent.turn({"session_id": f"s{n}", "message": f"make it {days[n % 3]}",
                                 "id": "m2", "session": first.session})

    async def all_of_them() -> list[TurnResult]:
        return await asyncio.gather(*(one(n) for n in range(15)))

    for n, result in enumerate(asyncio.run(all_of_them())):
        assert result.session.id == f"s{n}"
        assert result.session.data["day"] == days[n % 3]
        assert ("corrected" in codes(result)) == (days[n % 3] != "friday")
