"""load_skill checks what the model asks, as the product's table and skill list state it:

"The agent can load further model_selected skills itself with load_skill." — offered while
"There are model_selected skills not loaded yet", it "Loads one of them". A flow_only skill "is
loaded when the Flow started the agent with it", and nothing else loads it. And: "A tool the
agent calls but is not allowed to use counts against max_tool_calls and returns an error to the
agent." So a load_skill naming anything but a model_selected skill not loaded yet is refused
with an error, counts against max_tool_calls, and changes nothing (no skill, no goal, no memory).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Agent, FakeClock, MockProvider, ModelResponse
from tests.scenarios.lifecycle_support import (
    CHAT_FLOW,
    START,
    calls,
    conversation,
    lifecycle_agent,
    message,
    offered,
    said,
    tool_texts,
)

PICKED_NONE = {"skills": [], "language": None}
RETURNS = {"name": "trocas", "description": "Trocas e devoluções",
           "text": "Trocas em até 30 dias."}
SHIPPING = {"name": "frete", "description": "Prazos de frete", "text": "Frete grátis."}
TONE = {"name": "tom", "mode": "always_on", "description": "Tom", "text": "Fale com calma."}
# A flow_only skill with a goal: loading it by name would start the goal and keep it.
REFUND = {"name": "estorno", "mode": "flow_only", "description": "Estorno no cartão",
          "text": "Colete o número do pedido para o estorno.",
          "goal": {"description": "Estornar.", "fields": {"pedido": {"type": "string"}}}}
SKILLS = [RETURNS, SHIPPING, TONE, REFUND]


def _error(request: Any, index: int = 0) -> str:
    return str(json.loads(tool_texts(request)[index])["error"])


async def test_a_flow_only_skill_no_flow_named_is_refused_and_changes_nothing() -> None:
    """"A flow_only skill is loaded when the Flow started the agent with it": the model naming
    it gets an error; no skill, no goal, nothing kept in the session for the next turn."""
    script = [PICKED_NONE, calls(("load_skill", {"name": "estorno"})), said("Certo."),
              PICKED_NONE, said("Oi de novo.")]
    agent, provider = lifecycle_agent(script, {"skills": SKILLS})
    first = await agent.turn(message("quero estorno", "m1"))
    assert "load_skill" in _error(provider.calls[2]) and "estorno" in _error(provider.calls[2])
    assert offered(provider.calls[2]) == ["load_skill"]  # no goal tools: no goal started
    memory = first.session.metadata.get("lifecycle", {})
    assert memory.get("goal") is None and memory.get("flow_skills", []) == []
    assert first.goal_result is None and first.turn_outcome == "answered"
    await agent.turn(message("e agora?", "m2", first))
    assert "### estorno" not in provider.calls[4].system
    assert offered(provider.calls[4]) == ["load_skill"]


async def test_an_always_on_or_already_loaded_skill_is_refused() -> None:
    """Only "model_selected skills not loaded yet" load: an always_on skill and a
    model_selected one the classifier already preloaded are refused, each with its error."""
    script = [{"skills": ["trocas"], "language": None},
              calls(("load_skill", {"name": "tom"}), ("load_skill", {"name": "trocas"})),
              said("Ok.")]
    agent, provider = lifecycle_agent(script, {"skills": SKILLS})
    await agent.turn(message("quero trocar", "m1"))
    assert "tom" in _error(provider.calls[2], 0) and "always_on" in _error(provider.calls[2], 0)
    assert "already loaded" in _error(provider.calls[2], 1)
    assert offered(provider.calls[2]) == ["load_skill"]  # frete is still there to load


async def test_a_flow_only_skill_the_flow_named_is_still_not_reloaded_by_the_model() -> None:
    """The Flow's own skill is already loaded: load_skill on it is refused, and the skill stays
    loaded as the Flow asked (the refusal takes nothing away)."""
    script = [calls(("load_skill", {"name": "estorno"})), said("Qual o pedido?")]
    agent, provider = lifecycle_agent(script, {"skills": SKILLS})
    result = await agent.turn({"session_id": "s1",
                               "start": {"flow": "chat", "key": "k1", "skills": ["estorno"]}})
    assert "estorno" in _error(provider.calls[1])
    assert provider.calls[1].meta["skills"] == ["tom", "estorno"]
    assert offered(provider.calls[1]) == ["load_skill", "submit_goal_fields", "complete_goal"]
    assert result.session.metadata["lifecycle"]["goal"] == {"skill": "estorno", "answers": {}}


@pytest.mark.parametrize("name", ["estorno", "tom", "nada"])
async def test_a_refused_load_counts_against_max_tool_calls(name: str) -> None:
    """"counts against max_tool_calls": with a cap of 1 the refused call spends it, so the
    next call of the loop is offered no tools at all."""
    script = [PICKED_NONE, calls(("load_skill", {"name": name})), said("Ok.")]
    agent, provider = lifecycle_agent(script, {"skills": SKILLS, "max_tool_calls": 1})
    result = await agent.turn(message("oi", "m1"))
    assert offered(provider.calls[1]) == ["load_skill"]
    assert "error" in json.loads(tool_texts(provider.calls[2])[0])
    assert offered(provider.calls[2]) == []
    assert [m.text for m in result.messages] == ["Ok."]


async def test_a_model_selected_skill_not_loaded_yet_still_loads() -> None:
    """The one thing load_skill is for: a model_selected skill not loaded yet loads and its text
    comes back."""
    script = [PICKED_NONE, calls(("load_skill", {"name": "frete"})), said("Frete grátis.")]
    agent, provider = lifecycle_agent(script, {"skills": SKILLS})
    await agent.turn(message("frete?", "m1"))
    assert json.loads(tool_texts(provider.calls[2])[0]) == {
        "ok": True, "skill": "frete", "text": SHIPPING["text"]}
    assert offered(provider.calls[2]) == ["load_skill"]  # trocas remains


class Loader:
    """Each conversation's model asks load_skill for the skill its message names ("load X"),
    then answers with the skills its prompt holds, the tools it is offered and what the tool
    said; a later message gets the same."""

    async def generate(self, request: Any) -> ModelResponse:
        await asyncio.sleep(0)  # let the other conversations interleave
        if request.schema_name == "skills":
            return ModelResponse(json=PICKED_NONE)
        user = [m.text for m in request.messages if m.role == "user"][-1]
        results = [m.text for m in request.messages if m.role == "tool"]
        if user.startswith("load ") and not results:
            return calls(("load_skill", {"name": user.split()[1]}))
        skills = ",".join(request.meta.get("skills", []))
        tools = ",".join(t.name for t in request.tools)
        return ModelResponse(json={"message": f"{user} | {skills} | {tools} | {results}"})


async def test_many_conversations_asking_for_any_skill_load_only_what_is_allowed() -> None:
    """Twenty-four conversations at once, a third asking for the flow_only goal skill, a third
    for the always_on one, a third for a model_selected one: only the last load it, and on the
    next turn no conversation carries another's skill or a goal it was refused."""
    agent = Agent(name="Ana", provider=Loader(), clock=FakeClock(START), flows=[CHAT_FLOW],
                  lifecycle={"skills": SKILLS})
    wanted = {f"s{i}": ("estorno", "tom", "trocas" if i % 2 else "frete")[i % 3]
              for i in range(24)}
    first = await asyncio.gather(*(
        agent.turn(conversation(sid, f"load {name} {sid}", f"{sid}-m1"))
        for sid, name in wanted.items()))
    second = await asyncio.gather(*(
        agent.turn(conversation(sid, f"oi {sid}", f"{sid}-m2", result))
        for (sid, _), result in zip(wanted.items(), first, strict=True)))
    for (sid, name), one, two in zip(wanted.items(), first, second, strict=True):
        text = one.messages[0].text
        assert text.startswith(f"load {name} {sid} | ")
        assert "| tom | load_skill | " in text  # never the goal tools
        if name in ("trocas", "frete"):
            assert f'"ok": true, "skill": "{name}"' in text
        else:
            assert '"error"' in text and '"ok"' not in text
        assert one.session.metadata.get("lifecycle", {}).get("goal") is None
        assert two.messages[0].text == f"oi {sid} | tom | load_skill | []"
        assert two.session.metadata.get("lifecycle", {}).get("goal") is None


names = st.one_of(
    st.sampled_from([s["name"] for s in SKILLS] + ["TROCAS", " frete", "estorno\x00"]),
    st.text(max_size=80), st.integers(), st.none(), st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names)
def test_whatever_name_the_model_sends_it_loads_only_a_model_selected_skill(name: Any) -> None:
    """Any name the model sends (any text, a number, nothing, a list): the turn answers, the
    tool says ok only for "trocas" or "frete" exactly, and no goal ever starts."""

    async def play() -> None:
        script = [PICKED_NONE, calls(("load_skill", {"name": name})), said("Ok.")]
        provider = MockProvider(script)
        agent = Agent(name="Ana", provider=provider, clock=FakeClock(START),
                      flows=[CHAT_FLOW], lifecycle={"skills": SKILLS})
        result = await agent.turn(message("oi", "m1"))
        assert [m.text for m in result.messages] == ["Ok."]
        answer = json.loads(tool_texts(provider.calls[2])[0])
        assert ("ok" in answer) == (name in ("trocas", "frete"))
        assert "error" in answer or answer["skill"] == name
        assert result.session.metadata.get("lifecycle", {}).get("goal") is None

    asyncio.run(play())
