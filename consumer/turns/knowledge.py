"""Putting the agent's knowledge behind PostgreSQL full-text search when the service starts.

An ``engine.Agent`` whose lifecycle enables ``search_knowledge`` over documents of its own (and
names no index of its own) searches them in memory when run alone. In the service its documents
are written to ``knowledge_excerpts`` under the agent's name and the agent is given the
``PostgresKnowledgeIndex`` instead, so every consumer replica searches the same rows. If the
table cannot be written (an unmigrated database) the in-memory index stays and a warning says
why: knowledge search keeps working either way.
"""

from __future__ import annotations

import logging
from typing import Any

from engine import Agent, InMemoryKnowledgeIndex
from store.knowledge import PostgresKnowledgeIndex
from store.pooler import Pooler

__all__ = ["attach_postgres_knowledge"]

log = logging.getLogger("turnflow.knowledge")


def _wants_postgres(agent: Any) -> bool:
    if not isinstance(agent, Agent):
        return False
    settings = agent.config.lifecycle
    return (
        settings is not None
        and settings.tools.search_knowledge
        and bool(settings.knowledge)
        and isinstance(settings.knowledge_index, InMemoryKnowledgeIndex)
    )


async def attach_postgres_knowledge(
    agent: Any, database_url: str | None, *, pooler: Pooler = "none"
) -> Any:
    """The agent to run: with the PostgreSQL index when it searches its own documents;
    ``pooler``, the database's pooler mode (store/pooler.py)."""
    if database_url is None or not _wants_postgres(agent):
        return agent
    settings = agent.config.lifecycle
    assert settings is not None
    index = await PostgresKnowledgeIndex.connect(
        database_url, agent=agent.name, pooled=False, pooler=pooler
    )
    try:
        rows = await index.replace_documents(settings.knowledge)
    except Exception as exc:  # the in-memory index still answers; say why once
        log.warning(
            "knowledge stays in memory: %s: %s", type(exc).__name__, exc,
            extra={"agent": agent.name},
        )
        await index.close()
        return agent
    log.info("knowledge in PostgreSQL", extra={"agent": agent.name, "excerpts": rows})
    return agent.with_knowledge_index(index)
