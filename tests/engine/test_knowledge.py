"""search_knowledge: FAQ first, best 5 excerpts, at most 6,000 characters, at most 8 sources."""

from __future__ import annotations

from collections.abc import Sequence

from engine.lifecycle.knowledge import (
    MAX_CHARS,
    MAX_EXCERPTS,
    MAX_SOURCES,
    InMemoryKnowledgeIndex,
    KnowledgeHit,
    excerpts,
    search_knowledge,
    search_sources,
    select,
)
from engine.lifecycle.settings import KnowledgeDocument


def doc(doc_id: str, text: str, *, type: str = "kb", source: str = "kb", title: str = "",
        url: str | None = None) -> KnowledgeDocument:
    return KnowledgeDocument(id=doc_id, title=title or doc_id, text=text, type=type,  # type: ignore[arg-type]
                             source=source, url=url)


def hit(doc_id: str, score: float, *, type: str = "kb", text: str = "x",
        source: str = "s") -> KnowledgeHit:
    return KnowledgeHit(doc_id, source, type, doc_id, text, score)  # type: ignore[arg-type]


DOCS = [
    doc("trocas", "Trocas em até 30 dias com nota fiscal.\n\nO frete da troca é grátis.",
        url="https://loja.com.br/trocas"),
    doc("entrega", "A entrega leva de 3 a 5 dias úteis para capitais."),
    doc("faq-troca", "Posso trocar um produto usado? Não, apenas sem uso.", type="faq",
        source="faq"),
]


async def test_the_best_matching_excerpt_comes_back_with_its_document() -> None:
    """A query about delivery finds the delivery document, accents folded."""
    index = InMemoryKnowledgeIndex(DOCS)
    hits = await search_knowledge(index, DOCS, "quantos dias uteis demora a entrega?")
    assert hits[0].document_id == "entrega"
    assert "3 a 5 dias" in hits[0].text


async def test_faq_excerpts_come_before_knowledge_base_ones() -> None:
    """Even when a page scores higher, an FAQ match is listed first."""
    index = InMemoryKnowledgeIndex(DOCS)
    hits = await search_knowledge(index, DOCS, "trocar troca trocas frete")
    assert hits[0].type == "faq"
    assert {h.document_id for h in hits} >= {"faq-troca", "trocas"}


async def test_nothing_found_is_an_empty_list() -> None:
    """A query sharing no word with the knowledge finds nothing."""
    index = InMemoryKnowledgeIndex(DOCS)
    assert await search_knowledge(index, DOCS, "astronomia quântica") == []
    assert await search_knowledge(index, DOCS, "   ") == []


def test_five_excerpts_at_most() -> None:
    """Of six hits, five are kept, best first."""
    chosen = select([hit(f"d{i}", 10 - i) for i in range(6)])
    assert len(chosen) == MAX_EXCERPTS == 5
    assert [h.document_id for h in chosen] == ["d0", "d1", "d2", "d3", "d4"]


def test_six_thousand_characters_at_most_the_last_excerpt_cut_to_fit() -> None:
    """Excerpts fill exactly 6,000 characters; the one that crosses the line is cut."""
    chosen = select([hit(f"d{i}", 10 - i, text="a" * 2_500) for i in range(4)])
    assert [len(h.text) for h in chosen] == [2_500, 2_500, 1_000]
    assert sum(len(h.text) for h in chosen) == MAX_CHARS
    exact = select([hit("a", 2, text="a" * 3_000), hit("b", 1, text="b" * 3_000),
                    hit("c", 0.5, text="c")])
    assert [len(h.text) for h in exact] == [3_000, 3_000]


def test_at_most_eight_sources_faq_sources_first() -> None:
    """Ten sources: the FAQ source and the first seven others are searched."""
    docs = [doc(f"d{i}", "texto", source=f"s{i}") for i in range(9)]
    docs.append(doc("f", "pergunta", type="faq", source="faq"))
    sources = search_sources(docs)
    assert len(sources) == MAX_SOURCES == 8
    assert sources == ["faq", "s0", "s1", "s2", "s3", "s4", "s5", "s6"]


async def test_documents_outside_the_searched_sources_are_not_found() -> None:
    """A ninth source is never read, even when it is the only match."""
    docs = [doc(f"d{i}", "comum", source=f"s{i}") for i in range(8)]
    docs.append(doc("late", "palavra rara", source="s8"))
    index = InMemoryKnowledgeIndex(docs)
    assert await search_knowledge(index, docs, "rara") == []


async def test_the_index_is_pluggable() -> None:
    """Any object with async search(query, sources=, limit=) can stand behind the tool; what
    it returns from a source it was not asked for is dropped."""

    class Fixed:
        def __init__(self) -> None:
            self.asked: list[tuple[str, Sequence[str], int]] = []

        async def search(
            self, query: str, *, sources: Sequence[str], limit: int
        ) -> list[KnowledgeHit]:
            self.asked.append((query, list(sources), limit))
            return [hit("other", 9.0, source="elsewhere"), hit("kb1", 1.0, source="kb"),
                    hit("faq1", 0.1, type="faq", source="faq")]

    index = Fixed()
    hits = await search_knowledge(index, DOCS, "troca")
    assert [h.document_id for h in hits] == ["faq1", "kb1"]
    assert index.asked == [("troca", ["faq", "kb"], 50)]


def test_documents_are_cut_at_paragraphs_into_excerpts() -> None:
    """Paragraphs are packed up to 1,200 characters; a longer paragraph is cut at a word."""
    long_paragraph = " ".join(["palavra"] * 400)  # 3,199 characters
    parts = excerpts(doc("x", f"Curto.\n\n{long_paragraph}\n\nFim."))
    assert parts[0] == "Curto."
    assert all(len(p) <= 1_200 for p in parts)
    assert parts[-1].endswith("Fim.")
    assert excerpts(doc("f", "Pergunta?\n\nResposta.", type="faq")) == ["Pergunta?\n\nResposta."]
