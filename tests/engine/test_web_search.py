"""Web search backends and limits: the Brave Search backend over httpx (no network: a mock
transport), parsing any answer without raising, domains, the footer."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.lifecycle.web_search import (
    BRAVE_KEY_ENV,
    BRAVE_URL,
    BraveWebSearch,
    OfflineWebSearch,
    WebResult,
    footer,
    in_domains,
    limit_results,
    parse_brave,
)

BRAVE_ANSWER = {"web": {"results": [
    {"title": "Guia", "url": "https://hortas.org/guia", "description": "tomate em vaso"},
    {"title": "Sem link"},
    {"title": "FTP", "url": "ftp://x.org/a"},
    {"url": "https://blog.org/t", "description": 3},
]}}


async def test_brave_sends_the_query_count_and_key_and_reads_the_results() -> None:
    """One GET to the Brave endpoint with q, count and the subscription token; only results
    with an http(s) url come back."""
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=BRAVE_ANSWER)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        backend = BraveWebSearch("k-123", client=client)
        found = await backend.search("tomate", limit=5, allowed_domains=["hortas.org"])
    [request] = seen
    assert str(request.url).startswith(BRAVE_URL)
    assert request.url.params["q"] == "tomate (site:hortas.org)"
    assert request.url.params["count"] == "5"
    assert request.headers["X-Subscription-Token"] == "k-123"
    assert found == [WebResult("Guia", "https://hortas.org/guia", "tomate em vaso"),
                     WebResult("https://blog.org/t", "https://blog.org/t", "")]


async def test_brave_raises_on_an_http_error_so_the_tool_reports_it() -> None:
    """A 429 from the API raises httpx.HTTPStatusError (the tool turns it into an error)."""
    transport = httpx.MockTransport(lambda request: httpx.Response(429, json={}))
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.HTTPStatusError):
            await BraveWebSearch("k", client=client).search("x", limit=5, allowed_domains=[])


def test_brave_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a key given or in the environment the backend refuses to be built, naming the
    variable."""
    monkeypatch.delenv(BRAVE_KEY_ENV, raising=False)
    with pytest.raises(ValueError, match=BRAVE_KEY_ENV):
        BraveWebSearch()
    monkeypatch.setenv(BRAVE_KEY_ENV, "from-env")
    assert BraveWebSearch() is not None


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["web", "results", "url", "title", "description", "x"]), inner,
        max_size=4),
    max_leaves=20,
)


@given(body=_JSON)
@settings(max_examples=300, deadline=None)
def test_property_any_answer_parses_to_results_or_nothing(body: Any) -> None:
    """Whatever JSON the API answers, parsing gives well-formed results and never raises."""
    for result in parse_brave(body):
        assert result.url.startswith(("http://", "https://")) and isinstance(result.title, str)


@given(text=st.text(max_size=60), domain=st.text(max_size=20))
@settings(max_examples=200, deadline=None)
def test_property_domain_checks_accept_or_refuse_any_text(text: str, domain: str) -> None:
    """A URL and a domain of arbitrary text are judged without raising."""
    assert in_domains(text, [domain]) in (True, False)


def test_domains_match_the_host_and_its_subdomains_only() -> None:
    """blog.loja.com is loja.com's; noloja.com is not; no domains means any."""
    assert in_domains("https://blog.loja.com/x", ["loja.com"])
    assert in_domains("https://www.loja.com", ["https://loja.com/"])
    assert not in_domains("https://noloja.com/x", ["loja.com"])
    assert in_domains("https://qualquer.net", [])


def test_limits_keep_five_distinct_results() -> None:
    """Duplicates go, and at most five remain."""
    many = [WebResult(f"t{i}", f"https://a.org/{i % 6}") for i in range(12)]
    assert [r.url for r in limit_results(many, [])] == [f"https://a.org/{i}" for i in range(5)]


def test_the_footer_shows_three_links_and_how_many_more() -> None:
    """Five results: three lines and "+2 more sources"; three: no count; none: no footer."""
    results = [WebResult(f"T{i}", f"https://a.org/{i}") for i in range(5)]
    assert footer(results) == ("Web:\n- T0: https://a.org/0\n- T1: https://a.org/1\n"
                               "- T2: https://a.org/2\n+2 more sources")
    assert footer(results[:3]) is not None and "more" not in (footer(results[:3]) or "")
    assert footer([]) is None


async def test_the_offline_backend_ranks_by_shared_words() -> None:
    """More query words in common ranks first; pages sharing none are left out."""
    backend = OfflineWebSearch([
        {"title": "Vaso", "url": "https://a.org/1", "snippet": "vaso"},
        {"title": "Tomate em vaso", "url": "https://a.org/2", "snippet": "tomate vaso"},
        {"title": "Outro", "url": "https://a.org/3", "snippet": "nada"},
    ])
    found = await backend.search("tomate vaso", limit=5, allowed_domains=[])
    assert [r.url for r in found] == ["https://a.org/2", "https://a.org/1"]
    assert json.dumps([r.title for r in found]) == '["Tomate em vaso", "Vaso"]'
