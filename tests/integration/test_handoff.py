"""Seed 002 through the service: a hand-off reaches outbound.messages, the session stays silent
until the host's handoff_cleared event, and knowledge search runs on PostgreSQL."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import pytest

from consumer import metrics
from engine import Agent, MockProvider, ModelResponse, ToolCall
from tests.integration.harness import SetupFactory, load_when, running_consumer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def greeter() -> Agent:
    """A code-only agent (no model call) that greets every message and hands off on keywords."""
    return Agent(
        name="Recepção",
        provider=MockProvider([]),
        flows=[{"id": "oi", "on": [{"message": []}],
                "steps": [{"id": "ola", "say": "Olá! Como posso ajudar?"}]}],
        lifecycle={"handoff": {"keywords": ["atendente"], "tag": "suporte",
                               "message": "Vou chamar uma pessoa."}},
    )


def said(values: list[dict[str, Any]], sid: str) -> list[tuple[str, str]]:
    """(kind, text) of a session's outbound messages, in topic order."""
    return [(v["kind"], v["text"]) for v in values if v["session_id"] == sid]


def handoffs() -> float:
    return metrics.TURN_OUTCOMES.labels(outcome="handoff")._value.get()


async def test_handoff_silence_and_clear_through_the_consumer(service_setup: SetupFactory) -> None:
    """A keyword hands off (one 'handoff' record with reason, summary and tag), messages after it
    are saved but answered by nobody, and handoff_cleared gives the session back to the agent."""
    setup = await service_setup()
    sid = f"handoff-{uuid.uuid4().hex[:8]}"
    settings = setup.settings()
    before = handoffs()
    inputs = [
        {"session_id": sid, "message": "oi", "id": "m1"},
        {"session_id": sid, "message": "quero um atendente", "id": "m2"},
        {"session_id": sid, "message": "alô?", "id": "m3"},
        {"session_id": sid, "event": "handoff_cleared", "key": "clear-1"},
        {"session_id": sid, "message": "voltei", "id": "m4"},
    ]
    async with running_consumer(settings, greeter()):
        await setup.produce(inputs)
        async with setup.reader() as replies:
            await replies.until(lambda v: len(said(v, sid)) >= 3)
            values = await replies.settle(0.5)
        loaded = await load_when(setup.database_url, sid, lambda s: s.version >= 5)

    assert said(values, sid) == [
        ("verbatim", "Olá! Como posso ajudar?"),
        ("handoff", "Vou chamar uma pessoa."),
        ("verbatim", "Olá! Como posso ajudar?"),
    ]
    record = next(v for v in values if v["kind"] == "handoff")
    assert record["handoff"]["reason"] == "keyword" and record["handoff"]["tag"] == "suporte"
    assert record["input_id"] == "m2" and record["key"] == f"handoff@{sid}:m2"
    assert record["meta"]["provenance"] == [] and record["meta"]["agent_id"]
    assert loaded.version == 5
    assert loaded.state["metadata"]["lifecycle"]["handoff"] is None
    assert handoffs() == before + 1


async def test_knowledge_search_runs_on_postgresql_in_the_service(
    service_setup: SetupFactory,
) -> None:
    """The consumer writes the agent's documents to knowledge_excerpts and the reply's
    provenance on outbound.messages names the document PostgreSQL found."""
    setup = await service_setup()
    sid = f"kb-{uuid.uuid4().hex[:8]}"
    name = f"Ajuda-{uuid.uuid4().hex[:6]}"
    search = ToolCall(id="c1", name="search_knowledge", arguments={"query": "garantia"})
    provider = MockProvider([ModelResponse(tool_calls=[search]),
                             {"message": "A garantia é de 12 meses."}])
    agent = Agent(
        name=name,
        provider=provider,
        flows=[{"id": "chat", "on": [{"message": []}], "steps": [{"id": "t", "prompt": "Ajude."}]}],
        lifecycle={"tools": {"search_knowledge": True}, "knowledge": [
            {"id": "garantia", "title": "Garantia", "url": "https://loja.com.br/garantia",
             "text": "A garantia de fábrica é de 12 meses."},
            {"id": "frete", "title": "Frete", "text": "Frete grátis acima de R$ 200."},
        ]},
    )
    settings = setup.settings()
    async with running_consumer(settings, agent):
        connection = await asyncpg.connect(setup.database_url)
        try:
            stored = await connection.fetch(
                "SELECT document_id FROM knowledge_excerpts WHERE agent = $1 ORDER BY 1", name
            )
        finally:
            await connection.close()
        await setup.produce([{"session_id": sid, "message": "qual a garantia?", "id": "m1"}])
        async with setup.reader() as replies:
            values = await replies.until(lambda v: len(said(v, sid)) >= 1)

    assert [r["document_id"] for r in stored] == ["frete", "garantia"]
    [reply] = [v for v in values if v["session_id"] == sid]
    assert reply["text"] == "A garantia é de 12 meses."
    assert reply["meta"]["agent_id"] == name
    assert reply["meta"]["provenance"] == [{"type": "kb", "title": "Garantia",
                                    "url": "https://loja.com.br/garantia",
                                    "document_id": "garantia"}]
    assert len(provider.calls) == 2
