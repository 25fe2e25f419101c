"""``web_search``: the agent searches the web through a pluggable backend, within limits code keeps.

Offered when ``tools.web_search`` is on and a ``web_search`` source is set and enabled. Each
search returns at most ``MAX_RESULTS`` results, only from ``allowed_domains`` when any are set
(the domain or a subdomain of it), and a conversation may search ``max_per_conversation`` times
(3 unless set); past that the tool answers ``LIMIT_ERROR`` and counts nothing. A host that also
keeps a daily limit per workspace wraps the backend so it raises ``DailyLimitReached`` past it;
the tool then answers ``DAILY_LIMIT_ERROR`` and counts nothing either. Results found this
turn become ``web`` provenance entries and the web search footer (always, when the reply used
web search: the top 3 links and "+X more sources", each page counted once however many
searches returned it), and the allowed domains count among the link
check's own.

Backends: ``OfflineWebSearch`` searches a fixed list of pages in memory (tests, the demo, any
deployment without internet); ``BraveWebSearch`` calls the Brave Search API
(``https://api.search.brave.com/res/v1/web/search``) with the key from ``BRAVE_SEARCH_API_KEY``.
Any object with ``async search(query, *, limit, allowed_domains)`` can stand in.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

import httpx

from engine.lifecycle.knowledge import words

MAX_RESULTS = 5
FOOTER_LINKS = 3
LIMIT_ERROR = "web search limit reached for this conversation"
DAILY_LIMIT_ERROR = "web search limit reached for this workspace today"


class DailyLimitReached(Exception):
    """Raised by a backend the host wrapped with the workspace's daily quota, before searching:
    the tool answers ``DAILY_LIMIT_ERROR`` and counts nothing for the conversation."""
BRAVE_URL = "https://api.search.brave.com/res/v1/web/search"
BRAVE_KEY_ENV = "BRAVE_SEARCH_API_KEY"


@dataclass(frozen=True)
class WebResult:
    """One web page a search found."""

    title: str
    url: str
    snippet: str = ""


@runtime_checkable
class WebSearchBackend(Protocol):
    """Anything that searches the web: best results first, at most ``limit``."""

    async def search(
        self, query: str, *, limit: int, allowed_domains: Sequence[str]
    ) -> list[WebResult]: ...


def host_of(url: str) -> str:
    """The host of a URL or bare domain, lower case, without ``www.``; "" when it has none."""
    try:
        host = (urlsplit(url if "://" in url else f"https://{url}").hostname or "").lower()
    except ValueError:  # e.g. an unbalanced "[" reads as a broken IPv6 address
        return ""
    return host[4:] if host.startswith("www.") else host


def in_domains(url: str, domains: Sequence[str]) -> bool:
    """Whether ``url`` is on one of ``domains`` (or a subdomain); any URL when none are set."""
    return host_in(host_of(url), domains) if domains else True


def host_in(host: str, domains: Sequence[str]) -> bool:
    """Whether ``host`` is one of ``domains`` or a subdomain of one."""
    for domain in domains:
        bare = host_of(domain)
        if bare and (host == bare or host.endswith(f".{bare}")):
            return True
    return False


def limit_results(results: Sequence[WebResult], domains: Sequence[str]) -> list[WebResult]:
    """Code's own limits on whatever a backend returned: the domains, ``MAX_RESULTS``, once each."""
    out: list[WebResult] = []
    seen: set[str] = set()
    for result in results:
        if not result.url or result.url in seen or not in_domains(result.url, domains):
            continue
        seen.add(result.url)
        out.append(result)
        if len(out) == MAX_RESULTS:
            break
    return out


class OfflineWebSearch:
    """Pages held in memory, ranked by how many query words their title and text share."""

    def __init__(self, pages: Sequence[WebResult | dict[str, Any]]) -> None:
        self._pages = [p if isinstance(p, WebResult) else WebResult(**p) for p in pages]
        # Each page's words, folded once: a search only intersects sets.
        self._words = [frozenset(words(f"{p.title} {p.snippet}")) for p in self._pages]
        self._hosts = [host_of(p.url) for p in self._pages]

    async def search(
        self, query: str, *, limit: int, allowed_domains: Sequence[str]
    ) -> list[WebResult]:
        wanted = set(words(query))
        bare = [host_of(d) for d in allowed_domains]
        scored = []
        for index, page in enumerate(self._pages):
            score = len(wanted & self._words[index])
            if score and (not bare or host_in(self._hosts[index], bare)):
                scored.append((-score, index, page))
        scored.sort(key=lambda item: (item[0], item[1]))
        return [page for _, _, page in scored[:limit]]


class BraveWebSearch:
    """The Brave Search API over httpx. The key comes from ``BRAVE_SEARCH_API_KEY`` unless given.

    ``allowed_domains`` become ``site:`` terms of the query (and are checked again on the
    results by code). A failed request raises ``httpx.HTTPError``; the tool turns it into an
    error for the model.
    """

    def __init__(
        self,
        api_key: str | None = None,
        *,
        client: httpx.AsyncClient | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        key = api_key if api_key is not None else os.environ.get(BRAVE_KEY_ENV, "")
        if not key:
            raise ValueError(f"web search needs an API key: set {BRAVE_KEY_ENV}")
        self._key = key
        self._client = client
        self._timeout = timeout_s

    async def search(
        self, query: str, *, limit: int, allowed_domains: Sequence[str]
    ) -> list[WebResult]:
        sites = " OR ".join(f"site:{host_of(d)}" for d in allowed_domains)
        params = {"q": f"{query} ({sites})" if sites else query, "count": str(limit)}
        headers = {"Accept": "application/json", "X-Subscription-Token": self._key}
        if self._client is not None:
            response = await self._client.get(BRAVE_URL, params=params, headers=headers,
                                              timeout=self._timeout)
        else:
            async with httpx.AsyncClient(timeout=self._timeout) as client:
                response = await client.get(BRAVE_URL, params=params, headers=headers)
        response.raise_for_status()
        return parse_brave(response.json())


def parse_brave(body: Any) -> list[WebResult]:
    """The results of a Brave Search answer; anything malformed is skipped, never raised."""
    web = body.get("web") if isinstance(body, dict) else None
    items = web.get("results") if isinstance(web, dict) else None
    out: list[WebResult] = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        url, title = item.get("url"), item.get("title")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            continue
        snippet = item.get("description")
        out.append(WebResult(title=title if isinstance(title, str) else url, url=url,
                             snippet=snippet if isinstance(snippet, str) else ""))
    return out


def distinct_pages(results: Sequence[WebResult]) -> list[WebResult]:
    """The pages of a turn's searches once each (by URL), in the order they were first found.

    Two searches in one reply often return the same pages; the provenance and the footer both
    count each page once, so they agree on how many pages the reply used."""
    seen: set[str] = set()
    out: list[WebResult] = []
    for page in results:
        if page.url not in seen:
            seen.add(page.url)
            out.append(page)
    return out


def footer(results: Sequence[WebResult]) -> str | None:
    """The web search footer: the top 3 links and "+X more sources", over distinct pages."""
    pages = distinct_pages(results)
    if not pages:
        return None
    lines = [f"- {r.title}: {r.url}" for r in pages[:FOOTER_LINKS]]
    more = len(pages) - FOOTER_LINKS
    if more > 0:
        lines.append(f"+{more} more sources")
    return "Web:\n" + "\n".join(lines)
