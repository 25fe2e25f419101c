"""Escalation is a setting of its own, with the product's meaning in both places it appears:

- the tools table: ``handoff`` is offered when "tools_config.handoff is on and escalation is
  enabled";
- the plan check: "With escalation on, the conversation is handed over (handoff_reason:
  "plan_gated"); otherwise the agent stays silent."

Neither hand-off settings nor the handoff tool switch it on any more; an agent without it is
never handed over by its model or by the plan check (its own hand-off rules still fire).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import ValidationError

from engine import Agent, BuiltinTools, FakeClock, FlowConfigurationError, Lifecycle
from tests.scenarios.lifecycle_support import (
    CHAT_FLOW,
    START,
    EchoProvider,
    calls,
    conversation,
    lifecycle_agent,
    message,
    offered,
    said,
    tool_texts,
)
from tests.scenarios.support import codes

RULES = {"message": "Vou chamar uma pessoa.", "tag": "vendas", "keywords": ["atendente"]}
GATED = {"plan_check": lambda session: False}


@pytest.mark.parametrize(("tool", "escalation", "expected"), [
    (True, True, ["handoff"]),
    (True, False, []),
    (False, True, []),
])
async def test_the_handoff_tool_is_offered_only_with_the_tool_on_and_escalation_enabled(
    tool: bool, escalation: bool, expected: list[str]
) -> None:
    """"tools_config.handoff is on and escalation is enabled": both, or no handoff tool."""
    agent, provider = lifecycle_agent([said("Olá.")], {
        "tools": {"handoff": tool}, "escalation": escalation, "handoff": RULES})
    await agent.turn(message("oi", "m1"))
    assert offered(provider.calls[0]) == expected


async def test_without_escalation_a_handoff_call_is_refused_and_counts() -> None:
    """The model calls handoff anyway: "A tool the agent calls but is not allowed to use counts
    against max_tool_calls and returns an error to the agent." Nothing is handed over."""
    script = [calls(("handoff", {"reason": "user_requested", "summary": "quer gente"})),
              said("Não consigo transferir, mas posso ajudar.")]
    agent, provider = lifecycle_agent(script, {
        "tools": {"handoff": True, "set_state": True}, "escalation": False,
        "max_tool_calls": 1})
    result = await agent.turn(message("quero falar com uma pessoa", "m1"))
    assert offered(provider.calls[0]) == ["set_state"]
    assert json.loads(tool_texts(provider.calls[1])[0]) == {
        "error": "tool 'handoff' is not allowed here"}
    assert offered(provider.calls[1]) == []  # the refused call spent the only one
    assert [m.kind for m in result.messages] == ["ai"]
    assert result.turn_outcome == "answered"
    assert result.session.metadata["lifecycle"].get("handoff") is None


async def test_a_gated_turn_with_escalation_on_hands_over_with_plan_gated() -> None:
    """"With escalation on, the conversation is handed over (handoff_reason: "plan_gated")":
    escalation alone is enough, with no hand-off settings and no handoff tool."""
    agent, provider = lifecycle_agent([], {**GATED, "escalation": True})
    result = await agent.turn(message("oi", "m1"))
    [sent] = result.messages
    assert sent.kind == "handoff" and sent.handoff is not None
    assert sent.handoff.reason == "plan_gated" and sent.text == ""
    assert provider.calls == [] and result.turn_outcome == "gated"


@pytest.mark.parametrize("settings", [
    {"handoff": RULES},
    {"handoff": RULES, "tools": {"handoff": True}, "escalation": False},
])
async def test_a_gated_turn_without_escalation_stays_silent(settings: dict[str, Any]) -> None:
    """"otherwise the agent stays silent": hand-off settings, even the handoff tool switched
    on, do not make escalation on."""
    agent, provider = lifecycle_agent([], {**GATED, **settings})
    result = await agent.turn(message("oi", "m1"))
    assert result.messages == [] and provider.calls == []
    assert result.turn_outcome == "gated" and "handoff" not in codes(result)
    assert result.session.metadata.get("lifecycle", {}).get("handoff") is None


async def test_without_escalation_a_customer_asking_for_a_person_gets_an_answer() -> None:
    """What the docs promise an agent without escalation does: the model answers (it has no
    handoff tool), and only a hand-off rule the agent configured hands over."""
    agent, provider = lifecycle_agent(
        [said("Não transfiro, mas ligue 4000-0000.")], {"handoff": RULES})
    asked = await agent.turn(message("quero falar com uma pessoa", "m1"))
    assert offered(provider.calls[0]) == []
    assert [m.text for m in asked.messages] == ["Não transfiro, mas ligue 4000-0000."]
    keyword = await agent.turn(message("quero um atendente", "m2", asked))
    [sent] = keyword.messages
    assert sent.handoff is not None and sent.handoff.reason == "keyword"
    assert len(provider.calls) == 1


async def test_many_conversations_of_agents_with_and_without_escalation_at_once() -> None:
    """Forty conversations of two agents, interleaved, half of them on a plan without the agent:
    the agent with escalation hands its gated ones over (one key each), the one without keeps
    them silent, and included conversations are answered each with its own message."""
    included = {f"s{i}" for i in range(0, 40, 2)}

    async def plan(session: Any) -> bool:
        await asyncio.sleep(0)
        return session.id in included

    provider = EchoProvider()
    agents = {
        on: Agent(name="Ana", provider=provider, clock=FakeClock(START), flows=[CHAT_FLOW],
                  lifecycle={"plan_check": plan, "handoff": RULES, "tools": {"handoff": True},
                             "escalation": on})
        for on in (True, False)
    }
    jobs = [(f"s{i}", i % 4 < 2) for i in range(40)]
    results = await asyncio.gather(*(
        agents[on].turn(conversation(sid, f"pergunta de {sid}", f"{sid}-m1"))
        for sid, on in jobs))
    keys: list[str] = []
    for (sid, on), result in zip(jobs, results, strict=True):
        assert result.session.id == sid
        if sid in included:
            assert [m.text for m in result.messages] == [f"eco: pergunta de {sid}"]
            continue
        assert result.turn_outcome == "gated" and result.llm_calls == 0
        if on:
            [sent] = result.messages
            assert sent.handoff is not None and sent.handoff.reason == "plan_gated"
            assert sid in sent.key
            keys.append(sent.key)
        else:
            assert result.messages == []
    assert len(keys) == len(set(keys)) == 10
    speaks = [c for c in provider.calls if c.schema_name == "speak"]
    assert len(speaks) == 20
    for call in speaks:  # the handoff tool only where escalation is on
        on = dict(jobs)[call.messages[-1].text.split()[-1]]
        assert ("handoff" in [t.name for t in call.tools]) == on


def test_escalation_is_validated_when_the_agent_is_built() -> None:
    """A value that is not true or false is a configuration error naming escalation."""
    for bad in ("sometimes", 2, None):
        with pytest.raises(FlowConfigurationError, match="escalation"):
            Agent(name="Ana", lifecycle={"escalation": bad})


def test_the_handoff_tool_without_an_escalation_setting_is_refused() -> None:
    """tools.handoff on with escalation left unset is ambiguous (the tool would silently never
    be offered): the agent is not built, and the error says what to set."""
    with pytest.raises(FlowConfigurationError, match=r"tools\.handoff.*escalation"):
        Agent(name="Ana", lifecycle={"tools": {"handoff": True}})
    with pytest.raises(ValidationError, match="escalation"):
        Lifecycle(tools=BuiltinTools(handoff=True))
    assert Lifecycle(tools=BuiltinTools(handoff=True), escalation=False).escalation is False
    assert Lifecycle().escalation is False
