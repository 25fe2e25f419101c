"""search_knowledge over the whole Knowledge Base when the agent has no sources of its own.

The tools table: search_knowledge is offered when "tools_config.search_knowledge is on and the
agent has Knowledge Base, FAQ or folder sources (or none at all, which means the whole Knowledge
Base)", and it "Searches up to 8 knowledge sources, FAQ first, and returns the best 5 excerpts".
The limits: "Knowledge excerpts per search | 5, max 6,000 characters in total" and "Knowledge
sources per search | 8". The host passes the workspace's index (``workspace_knowledge``); the
agent's own documents, when it has any, are what it searches instead.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

from engine import (
    Agent,
    FakeClock,
    FlowConfigurationError,
    InMemoryWorkspaceKnowledge,
    KnowledgeDocument,
    KnowledgeHit,
    KnowledgeSource,
    ModelResponse,
    WorkspaceKnowledgeIndex,
)
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

WORKSPACE = [
    KnowledgeDocument(id="frete", title="Frete", source="site", url="https://loja.com/frete",
                      text="O frete é grátis acima de R$ 200 para todo o Brasil."),
    KnowledgeDocument(id="faq-troca", title="Posso trocar?", source="faq", type="faq",
                      text="Sim, a troca é grátis em até 30 dias."),
]
OWN = [KnowledgeDocument(id="horario", title="Horário", source="loja",
                         text="Abrimos de segunda a sábado; frete sob consulta.")]


class Recording:
    """A workspace index that remembers which sources each search was asked to read."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.asked: list[list[str]] = []

    async def sources(self) -> Sequence[KnowledgeSource]:
        listed: Sequence[KnowledgeSource] = await self.inner.sources()
        return listed

    async def search(self, query: str, *, sources: Sequence[str],
                     limit: int) -> list[KnowledgeHit]:
        self.asked.append(list(sources))
        found: list[KnowledgeHit] = await self.inner.search(query, sources=sources, limit=limit)
        return found


def _search(query: str, reply: str = "Pronto.") -> list[Any]:
    return [calls(("search_knowledge", {"query": query})), said(reply)]


async def test_an_agent_with_no_sources_searches_the_whole_knowledge_base() -> None:
    """"(or none at all, which means the whole Knowledge Base)": no documents of its own, the
    workspace's index given: offered, and what it finds is quoted, in provenance and billed."""
    agent, provider = lifecycle_agent(_search("frete grátis troca"), {
        "tools": {"search_knowledge": True},
        "workspace_knowledge": InMemoryWorkspaceKnowledge(WORKSPACE)})
    result = await agent.turn(message("tem frete grátis?", "m1"))
    assert offered(provider.calls[0]) == ["search_knowledge"]
    found = json.loads(tool_texts(provider.calls[1])[0])["excerpts"]
    assert [e["title"] for e in found] == ["Posso trocar?", "Frete"]  # FAQ first
    assert [s.document_id for s in result.messages[0].provenance] == ["faq-troca", "frete"]
    assert result.credits == 2


async def test_an_agent_with_sources_of_its_own_searches_only_those() -> None:
    """With Knowledge Base, FAQ or folder sources of its own, the workspace is not searched."""
    workspace = Recording(InMemoryWorkspaceKnowledge(WORKSPACE))
    agent, provider = lifecycle_agent(_search("frete"), {
        "tools": {"search_knowledge": True}, "knowledge": OWN,
        "workspace_knowledge": workspace})
    await agent.turn(message("frete?", "m1"))
    found = json.loads(tool_texts(provider.calls[1])[0])["excerpts"]
    assert [e["title"] for e in found] == ["Horário"] and workspace.asked == []


async def test_without_sources_or_a_workspace_index_there_is_nothing_to_offer() -> None:
    """No documents and no workspace index: search_knowledge is not offered."""
    agent, provider = lifecycle_agent([said("oi")], {"tools": {"search_knowledge": True}})
    await agent.turn(message("oi", "m1"))
    assert offered(provider.calls[0]) == []


async def test_a_workspace_search_reads_eight_sources_faq_first_and_keeps_the_limits() -> None:
    """Twelve sources, the three FAQ ones listed last: the search reads the three FAQ sources
    and the first five others (8), and returns 5 excerpts, FAQ first, 6,000 characters in all."""
    docs = [KnowledgeDocument(id=f"kb{i}", title=f"Página {i}", source=f"pasta{i}",
                              text=f"garantia {'longo ' * 300}{i}") for i in range(9)]
    docs += [KnowledgeDocument(id=f"faq{i}", title=f"Pergunta {i}", source=f"faq{i}", type="faq",
                               text="garantia de um ano") for i in range(3)]
    workspace = Recording(InMemoryWorkspaceKnowledge(docs))
    agent, provider = lifecycle_agent(_search("garantia"), {
        "tools": {"search_knowledge": True}, "workspace_knowledge": workspace})
    result = await agent.turn(message("garantia?", "m1"))
    [asked] = workspace.asked
    assert asked == ["faq0", "faq1", "faq2", "pasta0", "pasta1", "pasta2", "pasta3", "pasta4"]
    found = json.loads(tool_texts(provider.calls[1])[0])["excerpts"]
    assert len(found) == 5 and [e["type"] for e in found] == ["faq"] * 3 + ["kb"] * 2
    assert sum(len(e["text"]) for e in found) <= 6_000
    assert {s.document_id for s in result.messages[0].provenance} <= {
        "faq0", "faq1", "faq2", "kb0", "kb1", "kb2", "kb3", "kb4"}


async def test_code_keeps_the_limits_whatever_the_workspace_index_returns() -> None:
    """A careless index returns excerpts of sources it was not asked for, and too many, too
    long: code drops the others' and keeps 5 excerpts within 6,000 characters."""

    class Careless:
        async def sources(self) -> list[KnowledgeSource]:
            return [KnowledgeSource(name=f"s{i}") for i in range(10)]

        async def search(self, query: str, *, sources: Sequence[str],
                         limit: int) -> list[KnowledgeHit]:
            return [KnowledgeHit(document_id=f"d{i}", source=f"s{i}", type="kb",
                                 title=f"D{i}", text="x" * 2_000, score=float(i))
                    for i in reversed(range(10))]  # the best two from unasked s9 and s8

    agent, provider = lifecycle_agent(_search("x"), {
        "tools": {"search_knowledge": True}, "workspace_knowledge": Careless()})
    result = await agent.turn(message("x?", "m1"))
    found = json.loads(tool_texts(provider.calls[1])[0])["excerpts"]
    assert [e["title"] for e in found] == ["D7", "D6", "D5"]
    assert sum(len(e["text"]) for e in found) == 6_000
    assert [s.document_id for s in result.messages[0].provenance] == ["d7", "d6", "d5"]


async def test_many_conversations_search_the_workspace_each_for_its_own_answer() -> None:
    """Twenty conversations at once on one workspace index: each finds its own document, and
    its reply's provenance and credits are its own."""
    docs = [KnowledgeDocument(id=f"doc{i}", title=f"Assunto {i}", source=f"fonte{i % 3}",
                              text=f"resposta sobre tema{i}") for i in range(20)]

    class Searcher:
        async def generate(self, request: Any) -> ModelResponse:
            await asyncio.sleep(0)
            user = [m.text for m in request.messages if m.role == "user"][-1]
            results = [json.loads(m.text) for m in request.messages if m.role == "tool"]
            if not results:
                return calls(("search_knowledge", {"query": user}))
            titles = [e["title"] for e in results[0]["excerpts"]]
            return ModelResponse(json={"message": f"{user}: {titles}"})

    agent = Agent(name="Ana", provider=Searcher(), clock=FakeClock(START), flows=[CHAT_FLOW],
                  lifecycle={"tools": {"search_knowledge": True},
                             "workspace_knowledge": InMemoryWorkspaceKnowledge(docs)})
    results = await asyncio.gather(*(
        agent.turn(conversation(f"s{i}", f"tema{i}", f"m{i}")) for i in range(20)))
    for i, result in enumerate(results):
        assert result.messages[0].text == f"tema{i}: ['Assunto {i}']"
        assert [s.document_id for s in result.messages[0].provenance] == [f"doc{i}"]
        assert result.credits == 2


def test_the_workspace_index_is_checked_when_the_agent_is_built() -> None:
    """An object without sources() and search() is a configuration error naming the setting."""

    class SearchOnly:
        async def search(self, query: str, *, sources: Sequence[str],
                         limit: int) -> list[KnowledgeHit]:
            return []

    for bad in (SearchOnly(), "postgres://kb", 3):
        with pytest.raises(FlowConfigurationError, match="workspace_knowledge"):
            Agent(name="Ana", lifecycle={"workspace_knowledge": bad})


def test_with_workspace_knowledge_returns_a_new_agent() -> None:
    """How a host hands an agent its workspace's index: a copy with it, the original unchanged;
    a bad index or an agent without lifecycle settings is refused."""
    agent = Agent(name="Ana", lifecycle={"tools": {"search_knowledge": True}})
    index = InMemoryWorkspaceKnowledge(WORKSPACE)
    other = agent.with_workspace_knowledge(index)
    assert other.config.lifecycle is not None and agent.config.lifecycle is not None
    assert other.config.lifecycle.workspace_knowledge is index
    assert agent.config.lifecycle.workspace_knowledge is None
    assert isinstance(index, WorkspaceKnowledgeIndex)
    with pytest.raises(FlowConfigurationError, match="workspace_knowledge"):
        agent.with_workspace_knowledge(object())
    with pytest.raises(FlowConfigurationError, match="lifecycle"):
        Agent(name="Ana").with_workspace_knowledge(index)


async def test_sources_the_index_lists_wrongly_are_a_clear_error() -> None:
    """sources() must list KnowledgeSource items: anything else fails the turn naming it, so
    the host's bug is found, never answered as if the Knowledge Base were empty."""

    class Wrong:
        async def sources(self) -> list[Any]:
            return [{"name": "faq"}]

        async def search(self, query: str, *, sources: Sequence[str],
                         limit: int) -> list[KnowledgeHit]:
            return []

    agent, _ = lifecycle_agent(_search("x"), {
        "tools": {"search_knowledge": True}, "workspace_knowledge": Wrong()})
    with pytest.raises(TypeError, match=r"workspace_knowledge\.sources\(\)"):
        await agent.turn(message("x?", "m1"))
