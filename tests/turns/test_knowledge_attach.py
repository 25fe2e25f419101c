"""The consumer puts an agent's own knowledge on PostgreSQL when it starts."""

from __future__ import annotations

import logging
import uuid

import pytest

from consumer.turns.knowledge import attach_postgres_knowledge
from engine import Agent, InMemoryKnowledgeIndex
from store.knowledge import PostgresKnowledgeIndex

pytestmark = pytest.mark.integration

DOCS = [{"id": "garantia", "title": "Garantia", "text": "A garantia é de 12 meses."}]


def searching_agent(name: str) -> Agent:
    return Agent(name=name, lifecycle={"tools": {"search_knowledge": True}, "knowledge": DOCS})


async def test_an_agent_searching_its_own_documents_gets_the_postgres_index(
    database_url: str,
) -> None:
    """Its documents are written under its name and searched there; the original is unchanged."""
    agent = searching_agent(f"kb-{uuid.uuid4().hex[:8]}")
    attached = await attach_postgres_knowledge(agent, database_url)
    assert attached.config.lifecycle is not None and agent.config.lifecycle is not None
    index = attached.config.lifecycle.knowledge_index
    assert isinstance(index, PostgresKnowledgeIndex)
    assert isinstance(agent.config.lifecycle.knowledge_index, InMemoryKnowledgeIndex)
    hits = await index.search("garantia", sources=["knowledge"], limit=5)
    assert [h.document_id for h in hits] == ["garantia"]
    await index.replace_documents([])


async def test_other_agents_are_left_as_they_are(database_url: str) -> None:
    """No lifecycle, no search tool, or no documents: the same agent object comes back."""
    plain = Agent(name="a")
    no_tool = Agent(name="b", lifecycle={"knowledge": DOCS})
    no_docs = Agent(name="c", lifecycle={"tools": {"search_knowledge": True}})
    for agent in (plain, no_tool, no_docs):
        assert await attach_postgres_knowledge(agent, database_url) is agent
    assert await attach_postgres_knowledge(searching_agent("d"), None) is not None


async def test_an_unwritable_table_keeps_the_in_memory_index(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A database without the table (unmigrated): a warning, and search stays in memory."""
    from sqlalchemy.engine import make_url

    missing = make_url(database_url).set(database="postgres").render_as_string(
        hide_password=False)
    agent = searching_agent("e")
    with caplog.at_level(logging.WARNING, logger="turnflow.knowledge"):
        attached = await attach_postgres_knowledge(agent, missing)
    assert attached is agent
    assert "knowledge stays in memory" in caplog.text
