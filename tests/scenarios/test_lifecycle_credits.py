"""Lifecycle step 8, billing: every turn states the AI credits it costs (a reply 1, +1 per search
that found something, web and images on top; nothing for gated, fallback or error turns, only
the tools for a hand-off), on the result and on the turn's ``billed`` outcome line."""

from __future__ import annotations

import asyncio
from typing import Any

from engine import Agent, FakeClock, ModelResponse, ProviderError, TurnResult
from tests.scenarios.lifecycle_support import (
    CHAT_FLOW,
    START,
    calls,
    conversation,
    lifecycle_agent,
    message,
    said,
)

KNOWLEDGE = [
    {"id": "trocas", "title": "Trocas", "url": "https://loja.com.br/trocas",
     "text": "Trocas em até 30 dias com nota fiscal."},
]
SEARCH = {"tools": {"search_knowledge": True, "handoff": True}, "escalation": True,
          "knowledge": KNOWLEDGE,
          "fallback_message": "Desculpe."}


def billed(result: TurnResult) -> list[tuple[int | None, str | None]]:
    """The turn's billed lines, as (credits, detail)."""
    return [(o.credits, o.detail) for o in result.outcomes if o.code == "billed"]


async def test_an_answered_turn_costs_one_credit() -> None:
    """A plain reply: 1 credit, on the result and on one billed line."""
    agent, _ = lifecycle_agent([said("Olá!")], {})
    result = await agent.turn(message("oi", "m1"))
    assert result.credits == 1 and billed(result) == [(1, "reply 1")]


async def test_a_search_that_found_something_adds_one_and_one_that_found_nothing_is_free() -> None:
    """Two searches, one finds the trocas page: reply 1 + knowledge 1."""
    script = [calls(("search_knowledge", {"query": "trocas"}),
                    ("search_knowledge", {"query": "astronomia"})), said("Trocas em 30 dias.")]
    agent, _ = lifecycle_agent(script, SEARCH)
    result = await agent.turn(message("como faço trocas?", "m1"))
    assert result.credits == 2 and billed(result) == [(2, "reply 1, knowledge 1")]


async def test_every_search_that_finds_something_counts() -> None:
    """Two finding searches in one turn: reply 1 + 2."""
    script = [calls(("search_knowledge", {"query": "trocas"})),
              calls(("search_knowledge", {"query": "nota fiscal"})), said("Ok.")]
    agent, _ = lifecycle_agent(script, SEARCH)
    result = await agent.turn(message("trocas?", "m1"))
    assert result.credits == 3


async def test_fallback_and_error_turns_are_not_billed() -> None:
    """A fallback reply and a provider failure cost nothing, even after a finding search."""
    script = [calls(("search_knowledge", {"query": "trocas"})), {"message": None}]
    agent, _ = lifecycle_agent(script, SEARCH)
    fallback = await agent.turn(message("trocas?", "m1"))
    assert fallback.turn_outcome == "fallback" and fallback.credits == 0
    assert billed(fallback) == [(0, "not billed (fallback)")]
    agent, _ = lifecycle_agent([ProviderError("down", kind="retryable")], SEARCH)
    error = await agent.turn(message("trocas?", "m1"))
    assert error.turn_outcome == "error" and error.credits == 0


async def test_a_hand_off_bills_only_the_tools_used_before_it() -> None:
    """A finding search then the handoff tool: 1 credit (the search), no reply credit; a rule
    hand-off before any call: 0."""
    script = [calls(("search_knowledge", {"query": "trocas"})),
              calls(("handoff", {"reason": "cannot_help", "summary": "s"}))]
    agent, _ = lifecycle_agent(script, {**SEARCH, "handoff": {"keywords": ["humano"]}})
    result = await agent.turn(message("trocas?", "m1"))
    assert result.turn_outcome == "handoff" and result.credits == 1
    assert billed(result) == [(1, "knowledge 1")]
    agent, _ = lifecycle_agent([], {"handoff": {"keywords": ["humano"]}})
    rule = await agent.turn(message("quero um humano", "m1"))
    assert rule.credits == 0 and billed(rule) == [(0, "nothing used before the hand-over")]


async def test_a_gated_turn_is_not_billed() -> None:
    """The plan check said no: 0 credits."""
    agent, _ = lifecycle_agent([], {"plan_check": lambda session: False})
    result = await agent.turn(message("oi", "m1"))
    assert result.credits == 0 and billed(result) == [(0, "not billed (gated)")]


async def test_a_silent_turn_has_no_bill_and_an_agent_without_lifecycle_none_at_all() -> None:
    """A wake that says nothing has no billed line; an engine-only agent has no credits field."""
    flow = {"id": "espera", "on": [{"message": []}],
            "steps": [{"id": "w", "wait": {"ms": 60_000}}, {"id": "f", "do": "noop"}]}
    agent, _ = lifecycle_agent([], {}, flows=[flow], actions={"noop": lambda: None},
                               idle="silent")
    first = await agent.turn(message("oi", "m1"))
    later = await agent.turn({"session_id": "s1", "wake": first.schedule[0].key,
                              "session": first.session})
    assert later.turn_outcome is None and billed(later) == [] and later.credits == 0
    plain = Agent(name="Ana", provider=None, clock=FakeClock(START), idle="silent")
    result = await plain.turn(message("oi", "m1"))
    assert result.credits is None and "credits" not in result.model_dump(mode="json")


async def test_many_conversations_are_each_billed_for_what_they_used() -> None:
    """Thirty conversations at once: those that searched pay 2, the rest 1; no conversation's
    search is billed to another."""

    class PerConversation:
        """Searches first when the customer asked about trocas, then answers."""

        async def generate(self, request: Any) -> ModelResponse:
            await asyncio.sleep(0)
            user = [m.text for m in request.messages if m.role == "user"][-1]
            searched = any(m.role == "tool" for m in request.messages)
            if "trocas" in user and not searched:
                return calls(("search_knowledge", {"query": "trocas"}))
            return ModelResponse(json={"message": f"eco: {user}"})

    agent = Agent(name="Ana", provider=PerConversation(), clock=FakeClock(START),
                  flows=[CHAT_FLOW], lifecycle=SEARCH)
    asks = {f"s{i}": ("trocas?" if i % 3 == 0 else f"oi de s{i}") for i in range(30)}
    results = await asyncio.gather(
        *(agent.turn(conversation(sid, text, f"{sid}-m1")) for sid, text in asks.items()))
    for (sid, text), result in zip(asks.items(), results, strict=True):
        assert result.session.id == sid
        assert [m.text for m in result.messages] == [f"eco: {text}"]
        assert result.credits == (2 if text == "trocas?" else 1)
        sources = [s.document_id for s in result.messages[0].provenance]
        assert sources == (["trocas"] if text == "trocas?" else [])
