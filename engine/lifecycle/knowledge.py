"""``search_knowledge``: the agent's knowledge, searched by code, quoted to the model.

A search reads at most ``MAX_SOURCES`` of the agent's sources (FAQ sources first, then the
others in the order the agent lists them), ranks FAQ excerpts before knowledge-base ones, and
returns the best ``MAX_EXCERPTS`` excerpts, at most ``MAX_CHARS`` characters in all (the last
one is cut to fit). Where the excerpts come from is pluggable: a ``KnowledgeIndex`` returns
scored excerpts for a query; the engine alone uses ``InMemoryKnowledgeIndex`` (BM25 over
accent-folded words), the service can back it with PostgreSQL full-text search
(``store.knowledge``). Both cut documents into excerpts with ``excerpts()``.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from engine.lifecycle.settings import KnowledgeDocument

MAX_EXCERPTS = 5
MAX_CHARS = 6_000
MAX_SOURCES = 8
EXCERPT_CHARS = 1_200
CANDIDATES = 50  # excerpts asked of the index before FAQ-first ordering and the limits

_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class KnowledgeHit:
    """One excerpt a search found, with the document it came from and its score."""

    document_id: str
    source: str
    type: Literal["faq", "kb"]
    title: str
    text: str
    score: float
    url: str | None = None
    position: int = 0


@runtime_checkable
class KnowledgeIndex(Protocol):
    """Anything that returns the best excerpts for a query, best first, within ``sources``."""

    async def search(
        self, query: str, *, sources: Sequence[str], limit: int
    ) -> list[KnowledgeHit]: ...


def fold(text: str) -> str:
    """Lower case without accents: how both indexes compare words."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def words(text: str) -> list[str]:
    return _WORD.findall(fold(text))


def excerpts(document: KnowledgeDocument, size: int = EXCERPT_CHARS) -> list[str]:
    """The document cut at paragraph breaks into excerpts of at most ``size`` characters
    (a paragraph longer than that is cut at word boundaries). An FAQ entry is one excerpt."""
    if document.type == "faq":
        return [document.text.strip()[: size * 2]]
    out: list[str] = []
    current = ""
    for paragraph in (p.strip() for p in re.split(r"\n\s*\n", document.text)):
        if not paragraph:
            continue
        while len(paragraph) > size:
            cut = paragraph.rfind(" ", 0, size)
            cut = cut if cut > 0 else size
            if current:
                out.append(current)
                current = ""
            out.append(paragraph[:cut].strip())
            paragraph = paragraph[cut:].strip()
        if current and len(current) + 2 + len(paragraph) > size:
            out.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
    if current:
        out.append(current)
    return out


def search_sources(documents: Iterable[KnowledgeDocument]) -> list[str]:
    """The sources a search reads: FAQ sources first, then the rest, at most ``MAX_SOURCES``."""
    faq: list[str] = []
    other: list[str] = []
    for doc in documents:
        bucket = faq if doc.type == "faq" else other
        if doc.source not in faq and doc.source not in other:
            bucket.append(doc.source)
    return (faq + other)[:MAX_SOURCES]


class InMemoryKnowledgeIndex:
    """BM25 over the excerpts of the given documents; built once per agent."""

    K1 = 1.2
    B = 0.75

    def __init__(self, documents: Iterable[KnowledgeDocument]) -> None:
        self._entries: list[tuple[KnowledgeDocument, int, str, Counter[str], int]] = []
        frequency: Counter[str] = Counter()
        for doc in documents:
            for position, text in enumerate(excerpts(doc)):
                terms = Counter(words(f"{doc.title} {text}"))
                self._entries.append((doc, position, text, terms, sum(terms.values())))
                frequency.update(terms.keys())
        count = len(self._entries) or 1
        self._average = sum(e[4] for e in self._entries) / count if self._entries else 1.0
        self._idf = {
            term: math.log(1 + (count - n + 0.5) / (n + 0.5)) for term, n in frequency.items()
        }

    async def search(
        self, query: str, *, sources: Sequence[str], limit: int
    ) -> list[KnowledgeHit]:
        wanted = set(words(query))
        allowed = set(sources)
        hits: list[KnowledgeHit] = []
        for doc, position, text, terms, length in self._entries:
            if doc.source not in allowed:
                continue
            score = 0.0
            for term in wanted:
                tf = terms.get(term, 0)
                if tf:
                    norm = self.K1 * (1 - self.B + self.B * length / self._average)
                    score += self._idf.get(term, 0.0) * tf * (self.K1 + 1) / (tf + norm)
            if score > 0:
                hits.append(
                    KnowledgeHit(doc.id, doc.source, doc.type, doc.title, text, score,
                                 doc.url, position)
                )
        hits.sort(key=lambda h: (-h.score, h.document_id, h.position))
        return hits[:limit]


def select(hits: Sequence[KnowledgeHit]) -> list[KnowledgeHit]:
    """FAQ first (each group best first), at most ``MAX_EXCERPTS``, ``MAX_CHARS`` in all."""
    ordered = [h for h in hits if h.type == "faq"] + [h for h in hits if h.type != "faq"]
    chosen: list[KnowledgeHit] = []
    budget = MAX_CHARS
    for hit in ordered:
        if len(chosen) == MAX_EXCERPTS or budget <= 0:
            break
        text = hit.text if len(hit.text) <= budget else hit.text[:budget]
        chosen.append(
            KnowledgeHit(hit.document_id, hit.source, hit.type, hit.title, text, hit.score,
                         hit.url, hit.position)
        )
        budget -= len(text)
    return chosen


async def search_knowledge(
    index: KnowledgeIndex, documents: Sequence[KnowledgeDocument], query: str
) -> list[KnowledgeHit]:
    """One search with every limit applied by code."""
    sources = search_sources(documents)
    if not query.strip() or not sources:
        return []
    return select(await index.search(query, sources=sources, limit=CANDIDATES))
