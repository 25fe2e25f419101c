"""Lifecycle step 8, message meta: every message of a lifecycle agent carries ``agent_id``, and
its replies the ``provenance`` of this turn's searches (at most 8)."""

from __future__ import annotations

import asyncio
from typing import Any

from engine import Agent, FakeClock, ModelResponse
from tests.scenarios.lifecycle_support import (
    CHAT_FLOW,
    START,
    calls,
    conversation,
    lifecycle_agent,
    message,
    said,
)


async def test_every_message_carries_the_agent_id() -> None:
    """A say step, a reply and a hand-off all name the agent; agent_id defaults to its name."""
    flow = {"id": "chat", "on": [{"message": []}],
            "steps": [{"id": "oi", "say": "Olá!"}, {"id": "talk", "prompt": "Ajude."}]}
    agent, _ = lifecycle_agent([said("Em que posso ajudar?")], {}, flows=[flow])
    result = await agent.turn(message("oi", "m1"))
    assert [(m.kind, m.agent_id) for m in result.messages] == [
        ("verbatim", "Ana"), ("ai", "Ana")]
    agent, _ = lifecycle_agent([], {"agent_id": "agt_42", "handoff": {"keywords": ["humano"]}})
    handed = await agent.turn(message("humano", "m1"))
    assert [(m.kind, m.agent_id) for m in handed.messages] == [("handoff", "agt_42")]
    assert handed.model_dump(mode="json")["messages"][0]["agent_id"] == "agt_42"


async def test_an_agent_without_lifecycle_settings_sends_no_meta() -> None:
    """Engine-only agents' messages keep exactly their fields."""
    agent = Agent(name="Ana", clock=FakeClock(START), flows=[
        {"id": "f", "on": [{"message": []}], "steps": [{"id": "s", "say": "Olá!"}]}])
    result = await agent.turn(message("oi", "m1"))
    dumped = result.model_dump(mode="json")["messages"][0]
    assert "agent_id" not in dumped and "provenance" not in dumped


async def test_many_conversations_each_carry_only_their_own_sources() -> None:
    """Twenty conversations searching for different documents at once: each reply lists the
    one document its own search found, and every message names the agent."""
    docs = [{"id": f"doc{i}", "title": f"Documento {i}", "text": f"palavra{i} explicada",
             "url": f"https://loja.com.br/p{i}"} for i in range(20)]

    class Searcher:
        async def generate(self, request: Any) -> ModelResponse:
            await asyncio.sleep(0)
            user = [m.text for m in request.messages if m.role == "user"][-1]
            if not any(m.role == "tool" for m in request.messages):
                return calls(("search_knowledge", {"query": user}))
            return ModelResponse(json={"message": f"sobre {user}"})

    agent = Agent(name="Ana", provider=Searcher(), clock=FakeClock(START), flows=[CHAT_FLOW],
                  lifecycle={"tools": {"search_knowledge": True}, "knowledge": docs})
    results = await asyncio.gather(
        *(agent.turn(conversation(f"s{i}", f"palavra{i}", f"m{i}")) for i in range(20)))
    for i, result in enumerate(results):
        [reply] = result.messages
        assert reply.text == f"sobre palavra{i}" and reply.agent_id == "Ana"
        assert [(s.document_id, s.url) for s in reply.provenance] == [
            (f"doc{i}", f"https://loja.com.br/p{i}")]
