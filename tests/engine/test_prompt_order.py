"""The speak prompt is built in the seed's order (seed 000, phase 6).

Each section carries a distinctive marker; the tests assert the markers' relative positions in
the ``system`` text of the recorded speak call, and that instructions whose ``if`` fails are left
out.
"""

from __future__ import annotations

from typing import Any

from engine import Agent, FakeClock, MockProvider
from engine.prompt import NO_MESSAGE_NOTE

MARKERS = [
    "NAME_ZULEICA",
    "PERSONA_X",
    "GOAL_X",
    "KNOWLEDGE_X",
    "FLOW_NAME_X",
    "FLOW_DESCRIPTION_X",
    "STEP_PROMPT_X",
    "ASK_EMAIL_X",
    "KNOWN_EMPRESA_X",
    "AGENT_INSTRUCTION_X",
    "FLOW_INSTRUCTION_X",
    "STEP_INSTRUCTION_X",
]


def build(provider: MockProvider) -> Agent:
    return Agent(
        name="NAME_ZULEICA",
        persona="PERSONA_X, atenciosa",
        goal="GOAL_X: qualificar leads",
        knowledge=["KNOWLEDGE_X: o plano pro custa 10"],
        provider=provider,
        clock=FakeClock("2026-01-05T09:00:00Z"),
        fields={
            "email": {"type": "email", "ask": "ASK_EMAIL_X"},
            "empresa": {"type": "string", "ask": "ASK_EMPRESA_HIDDEN"},
        },
        instructions=[
            {"must": "AGENT_INSTRUCTION_X", "if": {"known": "empresa"}},
            {"must": "AGENT_HIDDEN_INSTRUCTION", "if": {"missing": "empresa"}},
        ],
        flows=[
            {
                "id": "cadastro",
                "name": "FLOW_NAME_X",
                "description": "FLOW_DESCRIPTION_X",
                "on": [{"message": []}],
                "instructions": [{"should": "FLOW_INSTRUCTION_X"}],
                "steps": [
                    {"id": "ola", "say": "ALREADY_SENT_X"},
                    {
                        "id": "dados",
                        "prompt": "STEP_PROMPT_X",
                        "collect": ["email", "empresa"],
                        "instructions": [
                            {"never": "STEP_INSTRUCTION_X"},
                            {"never": "STEP_HIDDEN_INSTRUCTION", "if": {"missing": "empresa"}},
                        ],
                    },
                ],
            }
        ],
    )


def session() -> dict[str, Any]:
    return {
        "id": "s1",
        "v": 4,
        "version": 0,
        "data": {"empresa": "KNOWN_EMPRESA_X"},
        "runs": [],
        "claims": {},
        "inputs": [],
        "metadata": {},
    }


def positions(text: str, markers: list[str]) -> list[int]:
    found = [text.find(marker) for marker in markers]
    missing = [m for m, at in zip(markers, found, strict=True) if at < 0]
    assert not missing, f"missing from the prompt: {missing}"
    return found


async def test_speak_prompt_sections_come_in_the_seed_order() -> None:
    """The prompt is built per call in this order: identity, knowledge, flow, step prompt, pending asks, known fields, instructions agent-flow-step, the customer's message, what this turn already sent, the response format."""  # noqa: E501  # the seed sentence, paraphrased whole
    provider = MockProvider([{"message": "Qual o seu e-mail?", "email": None}])
    result = await build(provider).turn(
        {"session_id": "s1", "message": "CUSTOMER_MESSAGE_X", "id": "m1", "session": session()}
    )
    assert result.llm_calls == 1
    system = provider.calls[0].system
    order = positions(system, [*MARKERS, "CUSTOMER_MESSAGE_X", "ALREADY_SENT_X"])
    assert order == sorted(order), dict(zip([*MARKERS, "message", "sent"], order, strict=True))
    assert order[-1] < system.lower().rfind("json")
    last = provider.calls[0].messages[-1]
    assert (last.role, last.text) == ("user", "CUSTOMER_MESSAGE_X")


async def test_instructions_whose_if_fails_are_left_out() -> None:
    """The instructions whose if holds: agent, then flow, then step."""
    provider = MockProvider([{"message": "Qual o seu e-mail?", "email": None}])
    await build(provider).turn(
        {"session_id": "s1", "message": "oi", "id": "m1", "session": session()}
    )
    system = provider.calls[0].system
    assert "AGENT_HIDDEN_INSTRUCTION" not in system
    assert "STEP_HIDDEN_INSTRUCTION" not in system
    assert "ASK_EMPRESA_HIDDEN" not in system


async def test_without_a_message_the_prompt_says_the_assistant_speaks_first() -> None:
    """On anything but a message (a wake, an event, a start), a note that there is no new message and the assistant speaks first."""  # noqa: E501  # the seed sentence, quoted whole
    on_message = MockProvider([{"message": "Qual o seu e-mail?", "email": None}])
    await build(on_message).turn(
        {"session_id": "s1", "message": "CUSTOMER_MESSAGE_X", "id": "m1", "session": session()}
    )
    on_start = MockProvider([{"message": "Olá! Qual o seu e-mail?", "email": None}])
    await build(on_start).turn(
        {"session_id": "s1", "start": {"flow": "cadastro", "key": "k1"}, "session": session()}
    )
    with_message, speaks_first = on_message.calls[0].system, on_start.calls[0].system
    assert "CUSTOMER_MESSAGE_X" not in speaks_first
    assert NO_MESSAGE_NOTE not in with_message
    order = positions(speaks_first, ["STEP_INSTRUCTION_X", NO_MESSAGE_NOTE, "ALREADY_SENT_X"])
    assert order == sorted(order)


async def test_a_pending_field_with_fixed_values_names_them() -> None:
    """A pending field whose values are fixed (``enum``) says them beside its ask, so a model
    that reads no grammar can map "my brakes are squeaking" to ``brakes``; a free field does
    not, and a known field is not asked at all."""
    provider = MockProvider([{"message": "Which one?", "service": None, "note": None}])
    agent = Agent(
        name="Ana", provider=provider, clock=FakeClock("2026-01-05T09:00:00Z"),
        fields={"service": {"type": "string", "enum": ["tune-up", "flat-tire", "brakes"],
                            "ask": "Which service?"},
                "note": {"type": "string", "ask": "Anything else?"},
                "day": {"type": "string", "enum": ["monday", "friday"], "ask": "Which day?"}},
        flows=[{"id": "booking", "on": [{"message": []}],
                "steps": [{"id": "what", "collect": ["service", "note", "day"]}]}],
    )
    await agent.turn({"session_id": "s1", "message": "my brakes are squeaking", "id": "m1",
                      "session": {**session(), "data": {"day": "friday"}}})
    lines = provider.calls[0].system.splitlines()
    assert "- service (one of: tune-up, flat-tire, brakes): Which service?" in lines
    assert "- note: Anything else?" in lines
    assert not any(line.startswith("- day (one of") for line in lines)
