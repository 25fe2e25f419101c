"""``search_knowledge``: the agent's knowledge, searched by code, quoted to the model.

What is searched: the agent's own sources (the ``source`` names of its ``knowledge``
documents) when it has any; when it has none, the whole Knowledge Base of its workspace, through
the ``WorkspaceKnowledgeIndex`` the host passes (``Lifecycle.workspace_knowledge``, or
``Agent.with_workspace_knowledge``), which also lists the workspace's sources. Either way a
search reads at most ``MAX_SOURCES`` sources (FAQ sources first, then the others in the order
the agent, or the workspace index, lists them), ranks FAQ excerpts before knowledge-base ones,
and returns the best ``MAX_EXCERPTS`` excerpts, at most ``MAX_CHARS`` characters in all (the
last one is cut to fit). Code applies these limits to whatever an index returns, dropping
excerpts of sources it was not asked to read.

Where the excerpts come from is pluggable: a ``KnowledgeIndex`` returns scored excerpts for a
query; the engine alone uses ``InMemoryKnowledgeIndex`` (BM25 over accent-folded words) and
``InMemoryWorkspaceKnowledge`` for a workspace, the service can back the agent's own with
PostgreSQL full-text search (``store.knowledge``). All cut documents with ``excerpts()``.
"""

from __future__ import annotations

import inspect
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from engine.lifecycle.settings import KnowledgeDocument, Lifecycle

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


@dataclass(frozen=True)
class KnowledgeSource:
    """One source of a workspace's Knowledge Base: its ``name`` (what ``KnowledgeHit.source``
    and ``KnowledgeDocument.source`` say) and whether it is an FAQ (``faq``) or not (``kb``)."""

    name: str
    type: Literal["faq", "kb"] = "kb"


@runtime_checkable
class WorkspaceKnowledgeIndex(KnowledgeIndex, Protocol):
    """The whole Knowledge Base of a workspace, which the host passes to the engine.

    ``sources()`` lists the workspace's sources in the host's order (the first eight, FAQ
    sources first, are the ones a search reads); ``search`` is a ``KnowledgeIndex``'s, asked
    for those sources only. ``sources()`` may be async or plain."""

    def sources(self) -> Any: ...


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


def choose_sources(sources: Iterable[KnowledgeSource]) -> list[str]:
    """The sources a search reads: FAQ sources first, then the rest, each group in the order
    given, once each (the first listing decides a name's type), at most ``MAX_SOURCES``."""
    faq: list[str] = []
    other: list[str] = []
    for source in sources:
        if source.name in faq or source.name in other:
            continue
        (faq if source.type == "faq" else other).append(source.name)
    return (faq + other)[:MAX_SOURCES]


def search_sources(documents: Iterable[KnowledgeDocument]) -> list[str]:
    """The agent's own sources a search reads (``choose_sources`` over its documents)."""
    return choose_sources(KnowledgeSource(doc.source, doc.type) for doc in documents)


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


class InMemoryWorkspaceKnowledge(InMemoryKnowledgeIndex):
    """A workspace's whole Knowledge Base in memory: BM25 over every document, and its sources
    listed in the order their documents come (a source is ``faq`` when its first document is)."""

    def __init__(self, documents: Iterable[KnowledgeDocument]) -> None:
        documents = list(documents)
        super().__init__(documents)
        listed: dict[str, KnowledgeSource] = {}
        for doc in documents:
            listed.setdefault(doc.source, KnowledgeSource(doc.source, doc.type))
        self._sources = list(listed.values())

    async def sources(self) -> list[KnowledgeSource]:
        return list(self._sources)


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


async def _search(index: KnowledgeIndex, sources: list[str], query: str) -> list[KnowledgeHit]:
    """Ask ``index`` within ``sources``, then apply every limit by code (an excerpt of a source
    not asked for is dropped, whatever the index returned)."""
    if not query.strip() or not sources:
        return []
    asked = set(sources)
    hits = await index.search(query, sources=sources, limit=CANDIDATES)
    return select([hit for hit in hits if hit.source in asked])


async def search_knowledge(
    index: KnowledgeIndex, documents: Sequence[KnowledgeDocument], query: str
) -> list[KnowledgeHit]:
    """One search of the agent's own documents, with every limit applied by code."""
    return await _search(index, search_sources(documents), query)


async def workspace_sources(index: WorkspaceKnowledgeIndex) -> list[KnowledgeSource]:
    """The workspace's sources as its index lists them; a listing that is not
    ``KnowledgeSource`` items is the host's bug and raises ``TypeError`` saying so."""
    listed = index.sources()
    if inspect.isawaitable(listed):
        listed = await listed
    items = list(listed) if isinstance(listed, Iterable) else None
    if items is None or not all(isinstance(item, KnowledgeSource) for item in items):
        wrong = type(listed).__name__ if items is None else next(
            type(item).__name__ for item in items if not isinstance(item, KnowledgeSource))
        raise TypeError(
            f"workspace_knowledge.sources() must list KnowledgeSource items, not {wrong}"
        )
    return items


async def search_workspace(index: WorkspaceKnowledgeIndex, query: str) -> list[KnowledgeHit]:
    """One search of the whole Knowledge Base: the workspace's first eight sources, FAQ first,
    with every limit applied by code."""
    if not query.strip():
        return []
    return await _search(index, choose_sources(await workspace_sources(index)), query)


def searchable(settings: Lifecycle) -> bool:
    """Whether ``search_knowledge`` has anything to search: the agent's own documents (with
    their index), or, with none, the workspace's index."""
    if settings.knowledge:
        return settings.knowledge_index is not None
    return settings.workspace_knowledge is not None


async def search_for(settings: Lifecycle, query: str) -> list[KnowledgeHit]:
    """The search ``search_knowledge`` runs: the agent's own sources when it has any, else the
    whole Knowledge Base (the workspace index), else nothing."""
    if settings.knowledge:
        if settings.knowledge_index is None:
            return []
        return await search_knowledge(settings.knowledge_index, settings.knowledge, query)
    if settings.workspace_knowledge is not None:
        return await search_workspace(settings.workspace_knowledge, query)
    return []
