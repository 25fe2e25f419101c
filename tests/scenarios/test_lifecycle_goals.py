"""Skill goals: submit_goal_fields validated like fields, complete_goal, two extra tool calls
of headroom, never removed by an allowlist; outcome goal_completed, or task_completed in a task."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from engine import Agent, FakeClock, ModelResponse, Tool
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

LEAD = {
    "name": "cadastro", "mode": "always_on", "description": "Cadastro de interessados",
    "text": "Colete nome, e-mail e quantas pessoas.",
    "goal": {"description": "Cadastrar o interessado.", "fields": {
        "nome": {"type": "string"},
        "email": {"type": "email"},
        "pessoas": {"type": "integer", "description": "quantas pessoas"},
    }},
}
GOOD = {"nome": "Rita", "email": "rita@exemplo.com", "pessoas": "3"}


async def test_a_loaded_goal_skill_offers_the_goal_tools_and_states_the_goal() -> None:
    """The goal is active once its skill loads: both goal tools offered, the goal in the prompt."""
    agent, provider = lifecycle_agent([said("Qual seu nome?")], {"skills": [LEAD]})
    result = await agent.turn(message("oi", "m1"))
    assert offered(provider.calls[0]) == ["submit_goal_fields", "complete_goal"]
    assert "## Goal\nCadastrar o interessado." in provider.calls[0].system
    assert "- email [email]: missing" in provider.calls[0].system
    assert result.session.metadata["lifecycle"]["goal"] == {"skill": "cadastro", "answers": {}}
    assert result.turn_outcome == "answered"


async def test_answers_are_fitted_like_fields_and_bad_ones_come_back_as_errors() -> None:
    """A good name, a bad e-mail, an unknown field: only the name is kept, the rest are errors."""
    script = [calls(("submit_goal_fields", {"answers": {
        "nome": "Rita", "email": "não sei", "idade": 40}})), said("Qual o e-mail?")]
    agent, provider = lifecycle_agent(script, {"skills": [LEAD]})
    result = await agent.turn(message("sou a Rita", "m1"))
    answer = json.loads(tool_texts(provider.calls[1])[0])
    assert answer["saved"] == ["nome"] and answer["missing"] == ["email", "pessoas"]
    assert set(answer["errors"]) == {"email", "idade"}
    assert result.session.metadata["lifecycle"]["goal"]["answers"] == {"nome": "Rita"}


async def test_complete_goal_waits_for_every_field_then_finishes_with_goal_completed() -> None:
    """complete_goal is refused while a field is missing; with all answered the goal ends,
    its answers are the goal_result, and the turn is billed as answered (1 credit)."""
    script = [calls(("complete_goal", {})),
              calls(("submit_goal_fields", {"answers": GOOD}), ("complete_goal", {})),
              said("Cadastro feito!")]
    agent, provider = lifecycle_agent(script, {"skills": [LEAD]})
    result = await agent.turn(message("Rita, rita@exemplo.com, 3 pessoas", "m1"))
    assert json.loads(tool_texts(provider.calls[1])[0]) == {
        "error": "missing answers: nome, email, pessoas"}
    assert json.loads(tool_texts(provider.calls[2])[-1]) == {"ok": True, "completed": "cadastro"}
    assert result.turn_outcome == "goal_completed" and result.credits == 1
    assert result.goal_result is not None
    assert result.goal_result.outputs == {"nome": "Rita", "email": "rita@exemplo.com",
                                          "pessoas": 3}
    assert result.session.metadata["lifecycle"]["goal"] is None


async def test_a_goal_skill_stays_loaded_while_its_goal_is_active() -> None:
    """A model_selected goal skill picked once stays loaded on the next turn without a pick."""
    selected = {**LEAD, "mode": "model_selected"}
    script = [{"skills": ["cadastro"], "language": None},
              calls(("submit_goal_fields", {"answers": {"nome": "Rita"}})), said("E o e-mail?"),
              said("E quantas pessoas?")]
    agent, provider = lifecycle_agent(script, {"skills": [selected]})
    first = await agent.turn(message("quero me cadastrar", "m1"))
    await agent.turn(message("rita@exemplo.com", "m2", first))
    last = provider.calls[-1]
    assert last.schema_name == "speak" and last.meta["skills"] == ["cadastro"]
    assert last.meta["goal"]["answers"] == {"nome": "Rita"}
    assert len(provider.calls) == 4  # no classifier call once nothing is left to pick


async def test_goal_tools_get_two_extra_calls_past_max_tool_calls() -> None:
    """max_tool_calls 1 spent on a lookup: only the goal tools are offered, and they get two
    calls (submit and complete); then no tool is offered at all."""
    lookup = Tool(description="x", handler=lambda: "ok")
    flow = {**CHAT_FLOW, "steps": [{"id": "talk", "tools": ["lookup"]}]}
    script = [calls(("lookup", {})),
              calls(("submit_goal_fields", {"answers": GOOD}), ("complete_goal", {})),
              said("Feito.")]
    agent, provider = lifecycle_agent(script, {"skills": [LEAD], "max_tool_calls": 1},
                                      tools={"lookup": lookup}, flows=[flow])
    result = await agent.turn(message("oi", "m1"))
    assert offered(provider.calls[0]) == ["lookup", "submit_goal_fields", "complete_goal"]
    assert offered(provider.calls[1]) == ["submit_goal_fields", "complete_goal"]
    second = [json.loads(t) for t in tool_texts(provider.calls[2])[1:]]
    assert second[0]["saved"] == ["nome", "email", "pessoas"]
    assert second[1] == {"ok": True, "completed": "cadastro"}
    assert offered(provider.calls[2]) == [] and result.turn_outcome == "goal_completed"


async def test_past_the_cap_other_tools_are_refused_and_count() -> None:
    """After max_tool_calls a non-goal call is refused and counts, using up the headroom too."""
    lookup = Tool(description="x", handler=lambda: "ok")
    flow = {**CHAT_FLOW, "steps": [{"id": "talk", "tools": ["lookup"]}]}
    script = [calls(("lookup", {})), calls(("lookup", {}), ("lookup", {})), said("Hum.")]
    agent, provider = lifecycle_agent(script, {"skills": [LEAD], "max_tool_calls": 1},
                                      tools={"lookup": lookup}, flows=[flow])
    await agent.turn(message("oi", "m1"))
    refused = [json.loads(t) for t in tool_texts(provider.calls[2])[1:]]
    assert refused == [{"error": "tool call limit reached for this turn"}] * 2
    assert offered(provider.calls[2]) == []


async def test_an_allowlist_never_removes_the_goal_tools() -> None:
    """A goal skill allowing only one tool still offers both goal tools."""
    lookup = Tool(description="x", handler=lambda: "ok")
    flow = {**CHAT_FLOW, "steps": [{"id": "talk", "tools": ["lookup"]}]}
    agent, provider = lifecycle_agent(
        [said("Oi.")], {"skills": [{**LEAD, "tool_allowlist": ["set_state"]}],
                        "tools": {"search_knowledge": True},
                        "knowledge": [{"id": "d", "title": "t", "text": "x"}]},
        tools={"lookup": lookup}, flows=[flow])
    await agent.turn(message("oi", "m1"))
    assert offered(provider.calls[0]) == ["submit_goal_fields", "complete_goal"]


async def test_inside_a_flow_task_the_goal_replaces_the_task() -> None:
    """Started by a Flow with a goal skill: complete_task is not offered, and completing the
    goal completes the task (outputs are the answers, outcome task_completed, run ended)."""
    flow_skill = {**LEAD, "mode": "flow_only"}
    script = [calls(("submit_goal_fields", {"answers": GOOD}), ("complete_goal", {})),
              said("Pronto!")]
    agent, provider = lifecycle_agent(script, {"skills": [flow_skill],
                                               "tools": {"complete_task": True}})
    result = await agent.turn({"session_id": "s1", "start": {
        "flow": "chat", "key": "k1", "skills": ["cadastro"]}})
    assert "complete_task" not in offered(provider.calls[0])
    assert result.turn_outcome == "task_completed"
    assert result.task_result is not None and result.task_result.outputs["pessoas"] == 3
    assert [e.reason for e in result.ended] == ["task_completed"]


async def test_many_conversations_each_complete_their_own_goal() -> None:
    """Twenty-five conversations at once submit answers taken from their own messages: every
    goal_result holds exactly its conversation's answers."""

    class Filler:
        async def generate(self, request: Any) -> ModelResponse:
            await asyncio.sleep(0)
            sid = [m.text for m in request.messages if m.role == "user"][-1]
            done = [m for m in request.messages if m.role == "tool"]
            if not done:
                return calls(("submit_goal_fields", {"answers": {
                    "nome": f"cliente {sid}", "email": f"{sid}@exemplo.com",
                    "pessoas": sid[1:]}}))
            if len(done) == 1:
                return calls(("complete_goal", {}))
            return ModelResponse(json={"message": f"ok {sid}"})

    agent = Agent(name="Ana", provider=Filler(), clock=FakeClock(START), flows=[CHAT_FLOW],
                  lifecycle={"skills": [LEAD]})
    ids = [f"s{i}" for i in range(25)]
    results = await asyncio.gather(*(agent.turn(conversation(sid, sid, f"{sid}-m1"))
                                     for sid in ids))
    for sid, result in zip(ids, results, strict=True):
        assert result.turn_outcome == "goal_completed"
        assert result.goal_result is not None and result.goal_result.outputs == {
            "nome": f"cliente {sid}", "email": f"{sid}@exemplo.com", "pessoas": int(sid[1:])}
        assert [m.text for m in result.messages] == [f"ok {sid}"]
