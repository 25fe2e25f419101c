"""Lifecycle step 4, skills: always_on, flow_only and model_selected skills, the fast classifier
with its own budget, load_skill, tool allowlists and the 60,000-character cap."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from engine import Agent, FakeClock, FlowConfigurationError, ModelResponse, ProviderError, Tool
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

TONE = {"name": "tom", "mode": "always_on", "description": "Tom de voz",
        "text": "Fale com calma."}
RETURNS = {"name": "trocas", "description": "Trocas e devoluções",
           "text": "Trocas em https://lojaverde.com.br/trocas em até 30 dias."}
SHIPPING = {"name": "frete", "description": "Prazos e custos de frete",
            "text": "Frete grátis acima de R$ 200."}
BILLING = {"name": "boletos", "description": "Segunda via de boleto",
           "text": "Boletos em lojaverde.com.br/boletos."}
PICKED = {"skills": [], "language": None}


def picks(*names: str, language: str | None = None) -> dict[str, Any]:
    """The classifier's answer: these skills, this language."""
    return {"skills": list(names), "language": language}


async def test_an_always_on_skill_is_in_every_speak_prompt_without_a_classifier_call() -> None:
    """always_on: loaded every turn; with no model_selected skill there is no classifier call."""
    agent, provider = lifecycle_agent([said("Olá."), said("De novo.")], {"skills": [TONE]})
    first = await agent.turn(message("oi", "m1"))
    await agent.turn(message("e aí", "m2", first))
    assert [c.schema_name for c in provider.calls] == ["speak", "speak"]
    assert all("### tom\nFale com calma." in c.system for c in provider.calls)
    assert provider.calls[0].meta["skills"] == ["tom"] and first.llm_calls == 1


async def test_a_flow_only_skill_loads_when_the_start_names_it_and_stays() -> None:
    """flow_only: absent on a plain message; loaded by a start that names it, and later turns."""
    only = {**BILLING, "mode": "flow_only"}
    agent, provider = lifecycle_agent([said("Oi."), said("Segue."), said("Ok.")],
                                      {"skills": [only]})
    plain = await agent.turn(message("oi", "m1"))
    assert "## Skills" not in provider.calls[0].system
    started = await agent.turn({"session_id": "s1", "session": plain.session,
                                "start": {"flow": "chat", "key": "k1", "skills": ["boletos"]}})
    assert "### boletos" in provider.calls[1].system
    await agent.turn(message("e o boleto?", "m2", started))
    assert "### boletos" in provider.calls[2].system
    assert started.session.metadata["lifecycle"]["flow_skills"] == ["boletos"]


async def test_the_classifier_preloads_at_most_two_and_detects_the_language() -> None:
    """Three picked: the first two load; the language it read goes to the prompt; the call
    counts in llm_calls with its own outcome line and is not billed."""
    script = [picks("trocas", "frete", "boletos", language="es"), said("Claro.")]
    agent, provider = lifecycle_agent(script, {
        "skills": [RETURNS, SHIPPING, BILLING],
        "language": {"strategy": "cascade", "base_language": "pt"}})
    result = await agent.turn(message("quiero cambiar y saber el envío", "m1"))
    classify, speak = provider.calls
    assert classify.schema_name == "skills"
    assert "- frete: Prazos e custos de frete" in classify.system
    assert speak.meta["skills"] == ["trocas", "frete"] and "### boletos" not in speak.system
    assert speak.meta["language"] == "es"
    assert result.llm_calls == 2 and "skills-classified" in codes(result)
    assert result.credits == 1
    [line] = [o for o in result.outcomes if o.code == "skills-classified"]
    assert line.llm_calls == 1 and line.detail == "trocas,frete,boletos"


async def test_names_the_classifier_invents_are_ignored() -> None:
    """An unknown name or a malformed answer loads nothing and the turn goes on."""
    agent, provider = lifecycle_agent([picks("inventada"), said("Ok.")],
                                      {"skills": [RETURNS]})
    await agent.turn(message("oi", "m1"))
    assert "## Skills" not in provider.calls[1].system
    agent, provider = lifecycle_agent([{"skills": "trocas"}, said("Ok.")], {"skills": [RETURNS]})
    result = await agent.turn(message("oi", "m1"))
    assert result.messages[0].text == "Ok."


@pytest.mark.parametrize("failure", ["error", "slow"])
async def test_a_failing_or_slow_classifier_leaves_the_turn_to_go_on(failure: str) -> None:
    """The classifier fails or runs past its own short budget: no skills, the reply still
    comes, and the turn's own time budget is not touched by it."""
    timers: list[float] = []

    class Classifier:
        calls = 0

        async def generate(self, request: Any) -> ModelResponse:
            self.calls += 1
            if request.schema_name == "skills":
                if failure == "error":
                    raise ProviderError("down", kind="retryable")
                await asyncio.sleep(5)
            return ModelResponse(json={"message": "Sem skills."})

    def timer(seconds: float) -> Any:
        timers.append(seconds)
        return asyncio.timeout(seconds)

    agent = Agent(name="Ana", provider=Classifier(), clock=FakeClock(START), flows=[CHAT_FLOW],
                  lifecycle={"skills": [RETURNS], "classifier_timeout_ms": 100,
                             "timer": timer})
    result = await agent.turn(message("quero trocar", "m1"))
    assert [m.text for m in result.messages] == ["Sem skills."]
    assert "skills-unclassified" in codes(result) and result.llm_calls == 2
    assert timers == [8.0]


async def test_load_skill_is_offered_while_skills_remain_and_returns_the_text() -> None:
    """The model loads a skill itself; once none remain load_skill is no longer offered."""
    script = [PICKED, calls(("load_skill", {"name": "trocas"})), said("Trocas em 30 dias.")]
    agent, provider = lifecycle_agent(script, {"skills": [RETURNS]})
    result = await agent.turn(message("quero trocar", "m1"))
    assert offered(provider.calls[1]) == ["load_skill"]
    assert provider.calls[1].tools[0].parameters["properties"]["name"]["enum"] == ["trocas"]
    answer = json.loads(tool_texts(provider.calls[2])[0])
    assert answer == {"ok": True, "skill": "trocas", "text": RETURNS["text"]}
    assert offered(provider.calls[2]) == [] and result.credits == 1


async def test_load_skill_refuses_an_unknown_skill() -> None:
    """A name that is not a skill comes back as an error and loads nothing."""
    script = [PICKED, calls(("load_skill", {"name": "nada"})), said("Ok.")]
    agent, provider = lifecycle_agent(script, {"skills": [RETURNS]})
    await agent.turn(message("oi", "m1"))
    assert json.loads(tool_texts(provider.calls[2])[0]) == {"error": "unknown skill 'nada'"}


def _tools() -> dict[str, Tool]:
    return {name: Tool(description=name, handler=lambda: "ok")
            for name in ("pedido", "rastreio", "cupom")}


async def _offered_with(loaded: list[dict[str, Any]], more: list[dict[str, Any]] = ()) -> list[str]:
    """The tools offered when ``loaded`` are always_on and ``more`` stay model_selected."""
    flow = {**CHAT_FLOW, "steps": [{"id": "talk", "tools": ["pedido", "rastreio", "cupom"]}]}
    skills = [{**s, "mode": "always_on"} for s in loaded] + list(more)
    script = ([PICKED] if more else []) + [said("Ok.")]
    agent, provider = lifecycle_agent(script, {
        "skills": skills, "tools": {"handoff": True, "set_state": True, "complete_task": True},
        "escalation": True},
        tools=_tools(), flows=[flow])
    await agent.turn(message("oi", "m1"))
    return offered(provider.calls[-1])


async def test_allowlists_every_loaded_skill_has_one_gives_their_union() -> None:
    """Two allowlists: their union, plus handoff and complete_task which are never removed."""
    names = await _offered_with([{**RETURNS, "tool_allowlist": ["pedido"]},
                                 {**SHIPPING, "tool_allowlist": ["rastreio", "set_state"]}])
    assert names == ["pedido", "rastreio", "handoff", "set_state", "complete_task"]


async def test_allowlists_any_loaded_skill_without_one_keeps_every_tool() -> None:
    """One loaded skill with tool_allowlist null: all tools stay."""
    names = await _offered_with([{**RETURNS, "tool_allowlist": ["pedido"]}, SHIPPING])
    assert names == ["pedido", "rastreio", "cupom", "handoff", "set_state", "complete_task"]


async def test_allowlists_keep_load_skill_while_unloaded_skills_remain() -> None:
    """An allowlist without load_skill still leaves it offered while skills remain."""
    names = await _offered_with([{**RETURNS, "tool_allowlist": ["cupom"]}], [BILLING])
    assert names == ["cupom", "handoff", "complete_task", "load_skill"]


async def test_loaded_text_is_capped_at_sixty_thousand_characters() -> None:
    """Two 40,000-character skills: the second would pass the cap and is not loaded."""
    big = [{"name": f"grande{i}", "mode": "always_on", "text": "x" * 40_000} for i in range(2)]
    agent, provider = lifecycle_agent([said("Ok.")], {"skills": big})
    await agent.turn(message("oi", "m1"))
    assert provider.calls[0].meta["skills"] == ["grande0"]
    with pytest.raises(FlowConfigurationError):
        Agent(name="Ana", lifecycle={"skills": [{"name": "enorme", "text": "x" * 60_001}]})


async def test_a_skill_named_host_is_an_own_domain_for_the_link_check() -> None:
    """Loaded skill text counts for the link check: its plain host name makes links checked."""
    text = "Pague em https://lojaverde.com.br/boleto-falso hoje mesmo, por favor."
    agent, _ = lifecycle_agent([said(text)], {"skills": [{**BILLING, "mode": "always_on"}],
                                              "link_check": True})
    result = await agent.turn(message("boleto", "m1"))
    assert "boleto-falso" not in result.messages[0].text
    assert [f.action for f in result.link_fixes] == ["removed"]


async def test_many_conversations_each_get_the_skills_their_own_message_selects() -> None:
    """Thirty conversations at once: the classifier picks by each message, and each speak
    prompt holds only its own conversation's skill."""

    def classify(request: Any) -> dict[str, Any]:
        text = request.messages[-1].text
        return picks("trocas" if "troca" in text else "frete")

    provider = EchoProvider(classify=classify)
    agent = Agent(name="Ana", provider=provider, clock=FakeClock(START), flows=[CHAT_FLOW],
                  lifecycle={"skills": [RETURNS, SHIPPING]})
    asks = {f"s{i}": ("quero troca" if i % 2 else "qual o frete") for i in range(30)}
    results = await asyncio.gather(*(
        agent.turn(conversation(sid, f"{text} ({sid})", f"{sid}-m1"))
        for sid, text in asks.items()))
    for (sid, text), result in zip(asks.items(), results, strict=True):
        assert [m.text for m in result.messages] == [f"eco: {text} ({sid})"]
        assert result.llm_calls == 2
    speaks = [c for c in provider.calls if c.schema_name == "speak"]
    assert len(speaks) == 30
    for call in speaks:
        wanted = "trocas" if "troca" in call.messages[-1].text else "frete"
        assert call.meta["skills"] == [wanted]
