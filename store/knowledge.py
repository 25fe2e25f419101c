"""The agent's knowledge in PostgreSQL: full-text search behind the ``search_knowledge`` tool.

``PostgresKnowledgeIndex`` satisfies the engine's ``KnowledgeIndex``: documents are cut into the
same excerpts as the in-memory index (``engine.lifecycle.knowledge.excerpts``) and stored in
``knowledge_excerpts`` with a generated ``tsvector`` (GIN-indexed, ``simple`` configuration over
accent-folded text, so accents and case never decide a match, as in memory). A query matches
any of its words and ranks by ``ts_rank_cd``; the engine then applies FAQ-first and the limits.
Rows are keyed by agent name, so several agents share the table.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from engine.lifecycle.knowledge import KnowledgeHit, excerpts, fold, words
from engine.lifecycle.settings import KnowledgeDocument
from store.pooler import Pooler, engine_options
from store.urls import async_url

__all__ = ["PostgresKnowledgeIndex", "tsquery"]

_DELETE = text("DELETE FROM knowledge_excerpts WHERE agent = :agent")
_INSERT = text("""
INSERT INTO knowledge_excerpts
    (agent, document_id, position, source, type, title, url, text, search)
SELECT :agent, e.document_id, e.position, e.source, e.type, e.title, e.url, e.text, e.search
FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS e(
    document_id text, position int, source text, type text, title text, url text, text text,
    search text
)
""")
_SEARCH = text("""
SELECT document_id, position, source, type, title, url, text,
       ts_rank_cd(tsv, q) AS score
FROM knowledge_excerpts, to_tsquery('simple', :query) AS q
WHERE agent = :agent AND source = ANY(CAST(:sources AS text[])) AND tsv @@ q
ORDER BY score DESC, document_id, position
LIMIT :limit
""")


def tsquery(query: str) -> str:
    """The query's folded words as an OR ``tsquery`` (each quoted, so nothing is syntax)."""
    unique = list(dict.fromkeys(words(query)))
    return " | ".join(f"'{w}'" for w in unique)


class PostgresKnowledgeIndex:
    """Full-text search over one agent's knowledge; ``await connect(url, agent=...)``."""

    def __init__(self, engine: AsyncEngine, *, agent: str, owns_engine: bool = False) -> None:
        self._engine = engine
        self._agent = agent
        self._owns_engine = owns_engine

    @classmethod
    async def connect(
        cls, url: str, *, agent: str, pool_size: int = 2, pooled: bool = True,
        pooler: Pooler = "none",
    ) -> PostgresKnowledgeIndex:
        """A small pool of its own on ``url`` (plain ``postgresql://`` works). ``pooled=False``
        opens a connection per search and holds none between them, so the index needs no
        closing (how the consumer uses it)."""
        options: dict[str, Any] = (
            {"pool_size": pool_size, "max_overflow": 2} if pooled else {"poolclass": NullPool}
        )
        engine = create_async_engine(
            async_url(url), isolation_level="AUTOCOMMIT", **options, **engine_options(pooler, {})
        )
        return cls(engine, agent=agent, owns_engine=True)

    async def close(self) -> None:
        if self._owns_engine:
            await self._engine.dispose()

    async def replace_documents(self, documents: Iterable[KnowledgeDocument]) -> int:
        """Make the stored excerpts exactly these documents' (one transaction); returns rows."""
        rows: list[dict[str, Any]] = []
        for doc in documents:
            for position, excerpt in enumerate(excerpts(doc)):
                rows.append({
                    "document_id": doc.id,
                    "position": position,
                    "source": doc.source,
                    "type": doc.type,
                    "title": doc.title,
                    "url": doc.url,
                    "text": excerpt,
                    "search": fold(f"{doc.title} {excerpt}"),
                })
        async with self._engine.connect() as connection:
            connection = await connection.execution_options(isolation_level="READ COMMITTED")
            async with connection.begin():
                await connection.execute(_DELETE, {"agent": self._agent})
                if rows:
                    await connection.execute(
                        _INSERT, {"agent": self._agent, "rows": json.dumps(rows)}
                    )
        return len(rows)

    async def search(
        self, query: str, *, sources: Sequence[str], limit: int
    ) -> list[KnowledgeHit]:
        """The best excerpts for ``query`` within ``sources``, best first."""
        expression = tsquery(query)
        if not expression or not sources:
            return []
        async with self._engine.connect() as connection:
            result = await connection.execute(
                _SEARCH,
                {"agent": self._agent, "query": expression, "sources": list(sources),
                 "limit": limit},
            )
            return [
                KnowledgeHit(
                    document_id=row.document_id,
                    source=row.source,
                    type=row.type,
                    title=row.title,
                    text=row.text,
                    score=float(row.score),
                    url=row.url,
                    position=int(row.position),
                )
                for row in result.all()
            ]
