"""Seed 002, tools and limits: built-ins off unless enabled, set_state limits, knowledge search,
complete_task, max_tool_calls and the turn timeout."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from engine import Agent, FakeClock, Tool
from tests.scenarios.lifecycle_support import (
    CHAT_FLOW,
    START,
    ExpiredTimer,
    SlowProvider,
    calls,
    lifecycle_agent,
    message,
    offered,
    said,
    tool_texts,
)
from tests.scenarios.support import codes

KNOWLEDGE = [
    {"id": "trocas", "title": "Política de trocas", "url": "https://loja.com.br/trocas",
     "text": "Trocas em até 30 dias com nota fiscal."},
    {"id": "faq-frete", "title": "Frete grátis?", "type": "faq", "source": "faq",
     "text": "O frete é grátis acima de R$ 200."},
]


async def test_no_built_in_tool_is_offered_unless_enabled() -> None:
    """Lifecycle settings alone offer no tool; each enabled one is offered by name."""
    agent, provider = lifecycle_agent([said("oi")], {"fallback_message": "x"})
    await agent.turn(message("oi", "m1"))
    assert offered(provider.calls[0]) == []
    everything = {"tools": {"handoff": True, "set_state": True, "search_knowledge": True,
                            "complete_task": True}, "escalation": True, "knowledge": KNOWLEDGE}
    agent, provider = lifecycle_agent([said("oi")], everything)
    await agent.turn(message("oi", "m1"))
    assert offered(provider.calls[0]) == [
        "handoff", "set_state", "search_knowledge", "complete_task"]


async def test_search_knowledge_is_not_offered_without_knowledge() -> None:
    """With no documents and no index there is nothing to search."""
    agent, provider = lifecycle_agent([said("oi")], {"tools": {"search_knowledge": True}})
    await agent.turn(message("oi", "m1"))
    assert offered(provider.calls[0]) == []


async def test_set_state_remembers_a_fact_for_the_next_turns() -> None:
    """A saved fact is in the session and in the next speak prompt."""
    script = [calls(("set_state", {"key": "pedido", "value": "A-123"})), said("Anotado."),
              said("Seu pedido é A-123.")]
    agent, provider = lifecycle_agent(script, {"tools": {"set_state": True}})
    first = await agent.turn(message("meu pedido é A-123", "m1"))
    assert json.loads(tool_texts(provider.calls[1])[0]) == {"ok": True, "saved": "pedido"}
    assert first.session.metadata["lifecycle"]["state"] == {"pedido": "A-123"}
    await agent.turn(message("qual meu pedido?", "m2", first))
    assert "- pedido: A-123" in provider.calls[2].system
    assert provider.calls[2].meta["state"] == {"pedido": "A-123"}


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"key": "agent_state", "value": "x"}, "reserved"),
        ({"key": "Agent_Task", "value": "x"}, "reserved"),
        ({"key": "_x", "value": "x"}, "must start with a letter or digit"),
        ({"key": "k" * 65, "value": "x"}, "longer than 64"),
        ({"key": "k", "value": "v" * 501}, "longer than 500"),
    ],
)
async def test_set_state_over_a_limit_is_an_error_and_saves_nothing(
    args: dict[str, Any], error: str
) -> None:
    """Over a limit the model reads the error and the session's state is unchanged."""
    script = [calls(("set_state", args)), said("Certo.")]
    agent, provider = lifecycle_agent(script, {"tools": {"set_state": True}})
    result = await agent.turn(message("oi", "m1"))
    assert error in json.loads(tool_texts(provider.calls[1])[0])["error"]
    assert result.session.metadata.get("lifecycle", {}).get("state", {}) == {}


async def test_the_thirty_first_key_is_refused_with_state_full() -> None:
    """A conversation with 30 keys cannot save a 31st."""
    full = {"lifecycle": {"state": {f"k{i}": "v" for i in range(30)}}}
    session = {"id": "s1", "v": 4, "metadata": full}
    script = [calls(("set_state", {"key": "k30", "value": "v"})), said("Ok.")]
    agent, provider = lifecycle_agent(script, {"tools": {"set_state": True}})
    result = await agent.turn(message("oi", "m1", session=session))
    assert json.loads(tool_texts(provider.calls[1])[0])["error"] == "state is full (30 keys)"
    assert len(result.session.metadata["lifecycle"]["state"]) == 30


async def test_search_knowledge_quotes_excerpts_and_the_reply_carries_provenance() -> None:
    """Found documents go back to the model and onto the ai message as its sources."""
    script = [calls(("search_knowledge", {"query": "frete grátis trocas"})),
              said("O frete é grátis acima de R$ 200.")]
    settings = {"tools": {"search_knowledge": True}, "knowledge": KNOWLEDGE}
    agent, provider = lifecycle_agent(script, settings)
    result = await agent.turn(message("o frete é grátis?", "m1"))
    found = json.loads(tool_texts(provider.calls[1])[0])["excerpts"]
    assert [e["title"] for e in found] == ["Frete grátis?", "Política de trocas"]
    [reply] = result.messages
    assert [(s.type, s.document_id, s.url) for s in reply.provenance] == [
        ("faq", "faq-frete", None), ("kb", "trocas", "https://loja.com.br/trocas")]


async def test_a_search_that_finds_nothing_says_so() -> None:
    """No match: an empty list and a note; the reply has no provenance."""
    script = [calls(("search_knowledge", {"query": "astronomia"})), said("Não sei.")]
    agent, provider = lifecycle_agent(script, {"tools": {"search_knowledge": True},
                                               "knowledge": KNOWLEDGE})
    result = await agent.turn(message("e as estrelas?", "m1"))
    assert json.loads(tool_texts(provider.calls[1])[0]) == {"excerpts": [], "note": "nothing found"}
    assert result.messages[0].provenance == []


async def test_provenance_keeps_at_most_eight_sources() -> None:
    """Ten documents found over two searches: the reply lists eight."""
    docs = [{"id": f"d{i}", "title": f"Doc {i}", "text": "alfa" if i < 5 else "beta",
             "source": f"s{i % 4}"} for i in range(10)]
    script = [calls(("search_knowledge", {"query": "alfa"}),
                    ("search_knowledge", {"query": "beta"})), said("Pronto.")]
    agent, _ = lifecycle_agent(script, {"tools": {"search_knowledge": True}, "knowledge": docs,
                                        "max_tool_calls": 2})
    result = await agent.turn(message("alfa beta", "m1"))
    assert [s.document_id for s in result.messages[0].provenance] == [
        "d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"]


async def test_complete_task_returns_outputs_to_the_host_and_ends_the_run() -> None:
    """complete_task: outputs on TurnResult.task_result, outcome task_completed, run ended."""
    script = [calls(("complete_task", {"outputs": {"cpf": "123"}})), said("Tudo certo!")]
    agent, _ = lifecycle_agent(script, {"tools": {"complete_task": True}})
    result = await agent.turn({"session_id": "s1", "start": {"flow": "chat", "key": "k1"}})
    assert result.task_result is not None
    assert result.task_result.outputs == {"cpf": "123"}
    assert result.task_result.flow_id == "chat"
    assert result.turn_outcome == "task_completed"
    assert [e.reason for e in result.ended] == ["task_completed"]
    assert [m.text for m in result.messages] == ["Tudo certo!"]


async def test_complete_task_is_not_offered_to_the_idle_speaker() -> None:
    """With no run speaking there is no task to complete."""
    agent, provider = lifecycle_agent([said("Oi")], {"tools": {"complete_task": True}}, flows=[])
    await agent.turn(message("oi", "m1"))
    assert offered(provider.calls[0]) == []


@pytest.mark.parametrize("cap", [1, 4, 6])
async def test_max_tool_calls_runs_that_many_and_refuses_the_next(cap: int) -> None:
    """At the cap every call runs; one past it is an error; then no tools are offered."""
    ran: list[int] = []
    lookup = Tool(description="x", handler=lambda args: ran.append(1) or {"ok": True})
    script = [calls(*[("lookup", {})] * (cap + 1)), said("Pronto.")]
    agent, provider = lifecycle_agent(
        script, {"max_tool_calls": cap}, tools={"lookup": lookup},
        flows=[{**CHAT_FLOW, "steps": [{"id": "talk", "tools": ["lookup"]}]}],
    )
    result = await agent.turn(message("oi", "m1"))
    results = [json.loads(t) for t in tool_texts(provider.calls[1])]
    assert len(ran) == cap
    assert results[:cap] == [{"ok": True}] * cap
    assert results[cap] == {"error": "tool call limit reached for this turn"}
    assert offered(provider.calls[1]) == [] and result.messages[0].text == "Pronto."


async def test_the_default_cap_is_four_across_rounds() -> None:
    """Tool calls count across rounds: 3 then 2 runs four; the fifth is refused."""
    ran: list[int] = []
    lookup = Tool(handler=lambda: ran.append(1) or "ok")
    script = [calls(*[("lookup", {})] * 3), calls(*[("lookup", {})] * 2), said("Fim.")]
    agent, provider = lifecycle_agent(
        script, {}, tools={"lookup": lookup},
        flows=[{**CHAT_FLOW, "steps": [{"id": "talk", "tools": ["lookup"]}]}],
    )
    await agent.turn(message("oi", "m1"))
    assert len(ran) == 4
    assert "limit reached" in tool_texts(provider.calls[2])[-1]
    assert offered(provider.calls[1]) == ["lookup"] and offered(provider.calls[2]) == []


async def test_a_tool_the_step_does_not_allow_counts_and_is_an_error() -> None:
    """A call to a tool not offered here is refused with an error and uses up the cap."""
    ran: list[int] = []
    lookup = Tool(handler=lambda: ran.append(1) or "ok")
    script = [calls(("set_state", {"key": "a", "value": "b"}), ("lookup", {})), said("Ok.")]
    agent, provider = lifecycle_agent(
        script, {"max_tool_calls": 1}, tools={"lookup": lookup},
        flows=[{**CHAT_FLOW, "steps": [{"id": "talk", "tools": ["lookup"]}]}],
    )
    result = await agent.turn(message("oi", "m1"))
    assert [json.loads(t) for t in tool_texts(provider.calls[1])] == [
        {"error": "tool 'set_state' is not allowed here"},
        {"error": "tool call limit reached for this turn"},
    ]
    assert ran == [] and offered(provider.calls[1]) == []
    assert result.session.metadata["lifecycle"]["state"] == {}


async def test_the_timeout_sends_the_fallback_message() -> None:
    """Time up with nothing to say: the agent's fallback message goes, outcome fallback."""
    timer = ExpiredTimer()
    provider = SlowProvider()
    agent = Agent(name="Ana", provider=provider, clock=FakeClock(START), flows=[CHAT_FLOW],
                  lifecycle={"fallback_message": "Desculpe, tente de novo.", "timer": timer,
                             "turn_timeout_ms": 2_000})
    result = await agent.turn(message("oi", "m1"))
    assert timer.asked == [2.0]
    assert [m.text for m in result.messages] == ["Desculpe, tente de novo."]
    assert result.turn_outcome == "fallback" and provider.calls == 1 and result.llm_calls == 1
    assert result.session.metadata["lifecycle"]["consecutive_fallbacks"] == 1


async def test_the_timeout_uses_what_the_model_already_said() -> None:
    """Time up after a tool round that came with words: those words are the reply."""
    budget = HeldTimer()

    class WordsThenSlow(SlowProvider):
        async def generate(self, request: Any) -> Any:
            self.calls += 1
            if self.calls == 1:
                return calls(("lookup", {}), text='{"message": "Estou verificando."}')
            budget.expire_now()
            return await super().generate(request)

    lookup = Tool(handler=lambda: "ok")
    agent = Agent(name="Ana", provider=WordsThenSlow(), clock=FakeClock(START),
                  tools={"lookup": lookup},
                  flows=[{**CHAT_FLOW, "steps": [{"id": "talk", "tools": ["lookup"]}]}],
                  lifecycle={"fallback_message": "Desculpe.", "timer": budget})
    result = await agent.turn(message("oi", "m1"))
    assert [m.text for m in result.messages] == ["Estou verificando."]
    assert result.turn_outcome == "answered" and result.llm_calls == 2


class HeldTimer:
    """A timer that runs until the test says the time is up."""

    def __init__(self) -> None:
        self.current: asyncio.Timeout | None = None

    def __call__(self, seconds: float) -> asyncio.Timeout:
        self.current = asyncio.timeout(None)
        return self.current

    def expire_now(self) -> None:
        assert self.current is not None
        self.current.reschedule(asyncio.get_running_loop().time())


async def test_the_timeout_without_a_fallback_message_takes_the_retry_path() -> None:
    """No fallback message: a timeout is a retryable failure, as without the lifecycle."""
    agent = Agent(name="Ana", provider=SlowProvider(), clock=FakeClock(START),
                  flows=[CHAT_FLOW], lifecycle={"timer": ExpiredTimer()})
    result = await agent.turn(message("oi", "m1"))
    assert result.messages == [] and result.turn_outcome == "error"
    assert "deferred" in codes(result) and len(result.schedule) == 1


async def test_an_empty_message_uses_the_fallback() -> None:
    """A reply with no message: the fallback message instead of a retry."""
    agent, _ = lifecycle_agent([{"message": None}], {"fallback_message": "Pode repetir?"})
    result = await agent.turn(message("oi", "m1"))
    assert [m.text for m in result.messages] == ["Pode repetir?"]
    assert result.turn_outcome == "fallback" and result.schedule == []


async def test_bad_arguments_to_built_in_tools_are_errors_to_the_model() -> None:
    """An empty query and non-object outputs are refused; nothing is found or completed."""
    script = [calls(("search_knowledge", {"query": "  "}), ("complete_task", {"outputs": "x"})),
              said("Certo.")]
    settings = {"tools": {"search_knowledge": True, "complete_task": True},
                "knowledge": KNOWLEDGE}
    agent, provider = lifecycle_agent(script, settings)
    result = await agent.turn(message("oi", "m1"))
    assert [json.loads(t) for t in tool_texts(provider.calls[1])] == [
        {"error": "query is required"}, {"error": "outputs must be an object"}]
    assert result.task_result is None and result.turn_outcome == "answered"
    assert result.messages[0].provenance == []


async def test_a_provider_failure_keeps_the_retry_ladder_even_with_a_fallback() -> None:
    """A wait can fix a provider failure: the step is re-parked, no fallback is sent."""
    from engine import ProviderError

    agent, _ = lifecycle_agent([ProviderError("overloaded", kind="retryable")],
                               {"fallback_message": "Desculpe."})
    result = await agent.turn(message("oi", "m1"))
    assert result.messages == [] and result.turn_outcome == "error"
    assert "deferred" in codes(result) and len(result.schedule) == 1
    assert result.session.metadata["lifecycle"]["consecutive_fallbacks"] == 0


async def test_a_failed_action_with_nothing_said_is_an_error_turn() -> None:
    """A do step that fails and sends nothing: outcome error."""

    def boom() -> Any:
        raise RuntimeError("down")

    flow = {"id": "act", "on": [{"message": []}], "steps": [{"id": "d", "do": "boom"}]}
    agent, _ = lifecycle_agent([], {}, flows=[flow], actions={"boom": boom}, idle="silent")
    result = await agent.turn(message("oi", "m1"))
    assert "action-failed" in codes(result) and result.turn_outcome == "error"
