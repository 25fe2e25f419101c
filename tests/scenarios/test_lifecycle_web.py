"""web_search: offered with an enabled source, up to 5 results within allowed_domains, 3 searches
per conversation by default, the web search footer, web provenance, +3 credits, own domains."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from engine import Agent, FakeClock, ModelResponse
from engine.lifecycle.web_search import (
    DAILY_LIMIT_ERROR,
    LIMIT_ERROR,
    DailyLimitReached,
    OfflineWebSearch,
    WebResult,
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

PAGES = [
    {"title": f"Horta {i}", "url": f"https://hortas.org/guia-{i}",
     "snippet": "como plantar tomate em vaso"} for i in range(7)
] + [{"title": "Tomate no blog", "url": "https://blog.exemplo.com/tomate",
      "snippet": "tomate em vaso"}]


def web(**source: Any) -> dict[str, Any]:
    """Lifecycle settings with web search on and an offline backend over PAGES."""
    return {"tools": {"web_search": True},
            "web_search": {"backend": OfflineWebSearch(PAGES), **source}}


async def test_web_search_is_offered_only_with_the_tool_on_and_an_enabled_source() -> None:
    """Tool on and source enabled: offered; source disabled, or missing: not offered."""
    for settings, expected in [
        (web(), ["web_search"]),
        (web(enabled=False), []),
        ({"tools": {"web_search": True}}, []),
    ]:
        agent, provider = lifecycle_agent([said("Oi.")], settings)
        await agent.turn(message("oi", "m1"))
        assert offered(provider.calls[0]) == expected


async def test_a_search_returns_at_most_five_results_within_allowed_domains() -> None:
    """Eight matching pages: five come back; with allowed_domains only that site's pages."""
    agent, provider = lifecycle_agent([calls(("web_search", {"query": "tomate vaso"})),
                                       said("Veja os guias.")], web())
    await agent.turn(message("como plantar tomate?", "m1"))
    results = json.loads(tool_texts(provider.calls[1])[0])["results"]
    assert len(results) == 5
    agent, provider = lifecycle_agent([calls(("web_search", {"query": "tomate vaso"})),
                                       said("Veja o blog.")],
                                      web(allowed_domains=["exemplo.com"]))
    await agent.turn(message("como plantar tomate?", "m1"))
    results = json.loads(tool_texts(provider.calls[1])[0])["results"]
    assert [r["url"] for r in results] == ["https://blog.exemplo.com/tomate"]


async def test_code_drops_results_a_backend_returns_outside_the_allowed_domains() -> None:
    """A backend that ignores allowed_domains: code filters its results anyway."""

    class Careless:
        async def search(self, query: str, *, limit: int,
                         allowed_domains: Sequence[str]) -> list[WebResult]:
            return [WebResult("Fora", "https://fora.net/x"), WebResult("Dentro",
                                                                      "https://loja.com/y")]

    settings = {"tools": {"web_search": True},
                "web_search": {"backend": Careless(), "allowed_domains": ["loja.com"]}}
    agent, provider = lifecycle_agent([calls(("web_search", {"query": "x"})), said("Ok.")],
                                      settings)
    await agent.turn(message("oi", "m1"))
    assert [r["url"] for r in json.loads(tool_texts(provider.calls[1])[0])["results"]] == [
        "https://loja.com/y"]


async def test_the_fourth_search_of_a_conversation_is_refused() -> None:
    """Three searches per conversation by default, over several turns; the fourth gets the
    limit error and nothing is searched."""
    script = [calls(("web_search", {"query": "tomate"}), ("web_search", {"query": "vaso"})),
              said("Um."), calls(("web_search", {"query": "horta"})),
              calls(("web_search", {"query": "tomate"})), said("Dois.")]
    agent, provider = lifecycle_agent(script, web())
    first = await agent.turn(message("a", "m1"))
    second = await agent.turn(message("b", "m2", first))
    assert json.loads(tool_texts(provider.calls[4])[-1]) == {"error": LIMIT_ERROR}
    assert second.session.metadata["lifecycle"]["web_searches"] == 3


async def test_the_limit_per_conversation_is_configurable() -> None:
    """max_per_conversation 1: the second search is refused."""
    script = [calls(("web_search", {"query": "tomate"}), ("web_search", {"query": "vaso"})),
              said("Ok.")]
    agent, provider = lifecycle_agent(script, web(max_per_conversation=1))
    await agent.turn(message("a", "m1"))
    assert json.loads(tool_texts(provider.calls[1])[1]) == {"error": LIMIT_ERROR}


async def test_the_web_footer_provenance_and_credits_follow_a_search_with_results() -> None:
    """Five results: the footer lists the top 3 and "+2 more sources", even with the sources
    footer off; the reply's provenance has five web entries; the turn costs 1 + 3 credits."""
    agent, _ = lifecycle_agent([calls(("web_search", {"query": "tomate vaso"})),
                                said("Plante em vaso fundo.")], web())
    result = await agent.turn(message("tomate?", "m1"))
    text = result.messages[0].text
    assert text.startswith("Plante em vaso fundo.\n\nWeb:\n- Horta 0: https://hortas.org/guia-0")
    assert text.endswith("- Horta 2: https://hortas.org/guia-2\n+2 more sources")
    provenance = result.messages[0].provenance
    assert [(s.type, s.url) for s in provenance][:2] == [
        ("web", "https://hortas.org/guia-0"), ("web", "https://hortas.org/guia-1")]
    assert len(provenance) == 5 and result.credits == 4


async def test_a_search_that_finds_nothing_adds_no_footer_and_costs_nothing() -> None:
    """No results: no footer, no provenance, the reply credit only."""
    agent, provider = lifecycle_agent([calls(("web_search", {"query": "astronomia"})),
                                       said("Não achei.")], web())
    result = await agent.turn(message("estrelas?", "m1"))
    assert json.loads(tool_texts(provider.calls[1])[0]) == {"results": [],
                                                           "note": "nothing found"}
    assert result.messages[0].text == "Não achei." and result.credits == 1


async def test_allowed_domains_are_own_domains_for_the_link_check() -> None:
    """A page the search found is kept word for word; an invented page on an allowed domain
    is removed."""
    text = ("O guia está em https://hortas.org/guia-0 e o truque em "
            "https://hortas.org/segredo-inventado para você.")
    agent, _ = lifecycle_agent([calls(("web_search", {"query": "tomate"})), said(text)],
                               {**web(allowed_domains=["hortas.org"]), "link_check": True})
    result = await agent.turn(message("tomate?", "m1"))
    sent = result.messages[0].text
    assert "segredo-inventado" not in sent.split("\n\nWeb:")[0]
    assert "https://hortas.org/guia-0" in sent
    assert [(f.action, f.url) for f in result.link_fixes] == [
        ("removed", "https://hortas.org/segredo-inventado")]


async def test_a_failing_backend_is_an_error_to_the_model_and_uses_no_search() -> None:
    """The backend raises: the model reads an error; the conversation keeps its searches."""

    class Down:
        async def search(self, query: str, *, limit: int,
                         allowed_domains: Sequence[str]) -> list[WebResult]:
            raise OSError("unreachable")

    settings = {"tools": {"web_search": True}, "web_search": {"backend": Down()}}
    agent, provider = lifecycle_agent([calls(("web_search", {"query": "x"})), said("Ok.")],
                                      settings)
    result = await agent.turn(message("oi", "m1"))
    assert json.loads(tool_texts(provider.calls[1])[0]) == {
        "error": "web search failed (OSError)"}
    assert result.session.metadata["lifecycle"]["web_searches"] == 0 and result.credits == 1


async def test_many_conversations_each_count_and_show_only_their_own_searches() -> None:
    """Twenty conversations search at once, each for its own page, some past the limit: each
    footer and provenance names only its own page, each counter is its own."""
    pages = [{"title": f"Pagina {i}", "url": f"https://site.org/p{i}",
              "snippet": f"assunto{i}"} for i in range(20)]

    class Searcher:
        async def generate(self, request: Any) -> ModelResponse:
            await asyncio.sleep(0)
            user = [m.text for m in request.messages if m.role == "user"][-1]
            if not any(m.role == "tool" for m in request.messages):
                return calls(("web_search", {"query": user}))
            return ModelResponse(json={"message": f"sobre {user}"})

    agent = Agent(name="Ana", provider=Searcher(), clock=FakeClock(START), flows=[CHAT_FLOW],
                  lifecycle={"tools": {"web_search": True},
                             "web_search": {"backend": OfflineWebSearch(pages)}})
    used = {f"s{i}": (3 if i % 4 == 0 else i % 3) for i in range(20)}
    results = await asyncio.gather(*(
        agent.turn(conversation(sid, f"assunto{sid[1:]}", f"{sid}-m1", session={
            "id": sid, "metadata": {"lifecycle": {"web_searches": n}}}))
        for sid, n in used.items()))
    for (sid, n), result in zip(used.items(), results, strict=True):
        text = result.messages[0].text
        if n >= 3:
            assert text == f"sobre assunto{sid[1:]}" and result.credits == 1
            assert result.session.metadata["lifecycle"]["web_searches"] == 3
        else:
            assert text.endswith(f"Web:\n- Pagina {sid[1:]}: https://site.org/p{sid[1:]}")
            assert [s.url for s in result.messages[0].provenance] == [
                f"https://site.org/p{sid[1:]}"]
            assert result.session.metadata["lifecycle"]["web_searches"] == n + 1
            assert result.credits == 4


async def test_the_footer_counts_distinct_pages_when_two_searches_find_the_same() -> None:
    """"Shows the top 3 links and "+X more sources"" over the pages the reply used, once each,
    as its provenance lists them: two searches finding the same five pages give "+2 more
    sources", not "+7"."""
    agent, _ = lifecycle_agent([calls(("web_search", {"query": "tomate vaso"}),
                                      ("web_search", {"query": "plantar tomate vaso"})),
                                said("Plante em vaso fundo.")], web())
    result = await agent.turn(message("tomate?", "m1"))
    text = result.messages[0].text
    footer = text.split("\n\nWeb:\n")[1].split("\n")
    assert footer == ["- Horta 0: https://hortas.org/guia-0", "- Horta 1: https://hortas.org/guia-1",
                      "- Horta 2: https://hortas.org/guia-2", "+2 more sources"]
    assert len(result.messages[0].provenance) == 5
    assert result.session.metadata["lifecycle"]["web_searches"] == 2


async def test_overlapping_searches_list_each_page_once_in_the_order_found() -> None:
    """Pages 0-4, then pages 3-7: eight distinct pages, the top 3 are the first found, and the
    footer's "+5 more sources" matches the eight web entries of the provenance."""

    class Shifting:
        def __init__(self) -> None:
            self.searches = 0

        async def search(self, query: str, *, limit: int,
                         allowed_domains: Sequence[str]) -> list[WebResult]:
            start = 3 * self.searches
            self.searches += 1
            return [WebResult(**p) for p in PAGES[start:start + 5]]

    settings = {"tools": {"web_search": True}, "web_search": {"backend": Shifting()}}
    agent, _ = lifecycle_agent([calls(("web_search", {"query": "a"})),
                                calls(("web_search", {"query": "b"})), said("Veja.")], settings)
    result = await agent.turn(message("tomate?", "m1"))
    footer = result.messages[0].text.split("\n\nWeb:\n")[1].split("\n")
    assert footer[-1] == "+5 more sources" and footer[0].endswith("guia-0")
    provenance = result.messages[0].provenance
    assert [s.url for s in provenance] == [p["url"] for p in PAGES[:8]]


async def test_many_conversations_each_footer_counts_its_own_distinct_pages() -> None:
    """Sixteen conversations at once, each searching twice for its own pages (the second search
    finds one new page and four of the first's): each footer counts its own six pages."""
    pages = [{"title": f"P{c}-{i}", "url": f"https://site.org/{c}/{i}",
              "snippet": f"conversa{c} c{c}p{i}"} for c in range(16) for i in range(6)]

    class Twice:
        async def generate(self, request: Any) -> ModelResponse:
            await asyncio.sleep(0)
            user = [m.text for m in request.messages if m.role == "user"][-1]
            if not any(m.role == "tool" for m in request.messages):
                return calls(("web_search", {"query": user}),
                             ("web_search", {"query": f"{user} c{user[8:]}p5"}))
            return ModelResponse(json={"message": f"sobre {user}"})

    agent = Agent(name="Ana", provider=Twice(), clock=FakeClock(START), flows=[CHAT_FLOW],
                  lifecycle={"tools": {"web_search": True},
                             "web_search": {"backend": OfflineWebSearch(pages)}})
    results = await asyncio.gather(*(
        agent.turn(conversation(f"s{c}", f"conversa{c}", f"m{c}")) for c in range(16)))
    for c, result in enumerate(results):
        footer = result.messages[0].text.split("\n\nWeb:\n")[1].split("\n")
        assert len(footer) == 4 and footer[-1] == "+3 more sources"
        assert all(f"https://site.org/{c}/" in line for line in footer[:3])
        assert {s.url for s in result.messages[0].provenance} == {
            f"https://site.org/{c}/{i}" for i in range(6)}


async def test_a_backend_past_the_workspace_daily_limit_gives_the_daily_error() -> None:
    """A host's quota wrapper raises DailyLimitReached: the model reads the daily limit error,
    nothing counts for the conversation, and the next search may still run."""

    class Quota:
        def __init__(self) -> None:
            self.left = 1

        async def search(self, query: str, *, limit: int,
                         allowed_domains: Sequence[str]) -> list[WebResult]:
            if self.left == 0:
                raise DailyLimitReached
            self.left -= 1
            return [WebResult("Horta", "https://hortas.org/x")]

    quota = Quota()
    script = [calls(("web_search", {"query": "tomate"}), ("web_search", {"query": "vaso"})),
              said("Ok.")]
    agent, provider = lifecycle_agent(
        script, {"tools": {"web_search": True}, "web_search": {"backend": quota}}
    )
    result = await agent.turn(message("a", "m1"))
    answers = [json.loads(text) for text in tool_texts(provider.calls[1])]
    assert answers[1] == {"error": DAILY_LIMIT_ERROR}
    assert answers[0]["results"][0]["url"] == "https://hortas.org/x"
    assert result.session.metadata["lifecycle"]["web_searches"] == 1
