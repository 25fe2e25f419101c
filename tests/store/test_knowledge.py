"""PostgreSQL full-text search behind search_knowledge, on a real database."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from engine.lifecycle.knowledge import search_knowledge
from engine.lifecycle.settings import KnowledgeDocument
from store.knowledge import PostgresKnowledgeIndex, tsquery

pytestmark = pytest.mark.integration

DOCS = [
    KnowledgeDocument(id="trocas", title="Trocas", url="https://loja.com.br/trocas",
                      text="Trocas em até 30 dias com nota fiscal.\n\nO frete da troca é grátis."),
    KnowledgeDocument(id="entrega", title="Entrega",
                      text="A entrega leva de 3 a 5 dias úteis para as capitais."),
    KnowledgeDocument(id="faq-usado", title="Produto usado", type="faq", source="faq",
                      text="Posso trocar um produto usado? Não, só produtos sem uso."),
]


@pytest.fixture
async def index(database_url: str) -> AsyncIterator[PostgresKnowledgeIndex]:
    """An index for a fresh agent name, its rows removed afterwards."""
    agent = f"agent-{uuid.uuid4().hex[:8]}"
    index = await PostgresKnowledgeIndex.connect(database_url, agent=agent)
    try:
        yield index
    finally:
        await index.replace_documents([])
        await index.close()


def test_queries_are_folded_quoted_words_joined_by_or() -> None:
    """Accents and case go, each word is a quoted lexeme, syntax characters never pass."""
    assert tsquery("Entrega ÚTEIS & (!) entrega") == "'entrega' | 'uteis'"
    assert tsquery("?!") == ""


async def test_search_finds_excerpts_accent_and_case_insensitively(
    index: PostgresKnowledgeIndex,
) -> None:
    """'UTEIS' finds the excerpt that says 'úteis', with its document, title and url."""
    assert await index.replace_documents(DOCS) == 3  # short paragraphs share an excerpt
    hits = await index.search("dias UTEIS", sources=["knowledge", "faq"], limit=10)
    assert hits[0].document_id == "entrega"
    assert hits[0].type == "kb" and hits[0].title == "Entrega" and hits[0].score > 0
    trocas = await index.search("frete", sources=["knowledge"], limit=10)
    assert [(h.document_id, h.position, h.url) for h in trocas] == [
        ("trocas", 0, "https://loja.com.br/trocas")
    ]


async def test_sources_outside_the_list_are_not_searched(index: PostgresKnowledgeIndex) -> None:
    """Only the sources the engine passes are read."""
    await index.replace_documents(DOCS)
    assert await index.search("usado", sources=["knowledge"], limit=10) == []
    found = await index.search("usado", sources=["faq"], limit=10)
    assert [h.document_id for h in found] == ["faq-usado"]


async def test_the_engine_limits_apply_on_top_faq_first(index: PostgresKnowledgeIndex) -> None:
    """Through search_knowledge the FAQ answer comes before the knowledge-base page."""
    await index.replace_documents(DOCS)
    hits = await search_knowledge(index, DOCS, "trocar troca produto frete")
    assert hits[0].type == "faq" and {h.document_id for h in hits} >= {"faq-usado", "trocas"}


async def test_replacing_documents_replaces_them_all(index: PostgresKnowledgeIndex) -> None:
    """A second load leaves only the new documents."""
    await index.replace_documents(DOCS)
    await index.replace_documents(DOCS[1:2])
    assert await index.search("frete", sources=["knowledge"], limit=10) == []
    assert len(await index.search("entrega", sources=["knowledge"], limit=10)) == 1


async def test_the_tsvector_is_gin_indexed(database_url: str) -> None:
    """The migration adds a GIN index on the generated tsvector."""
    connection = await asyncpg.connect(database_url)
    try:
        definition = await connection.fetchval(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_knowledge_excerpts_tsv'"
        )
    finally:
        await connection.close()
    assert definition is not None and "USING gin (tsv)" in definition
