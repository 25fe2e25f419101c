"""Routing inputs to registry agents, against PostgreSQL: bindings never cross workspaces, ids
are compared exactly, built agents stay within the cache, a new live version is picked up after
the refresh, and one workspace's plan and web-search quota never touch another's."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consumer.hosting.routing import RegistryRouter, RouteRefused, SingleAgent, WorkspaceWebSearch
from consumer.turns.parser import ParsedInput
from engine.definition import definition_digest
from engine.lifecycle.web_search import DailyLimitReached, WebResult
from engine.packs import PackSet
from engine.providers import RuleProvider
from store import Store
from store.hosting import Hosting


def _document(agent_id: str, workspace: str, text: str) -> dict[str, Any]:
    return {
        "agent_id": agent_id, "workspace": workspace, "name": "Bot", "lifecycle": {},
        "flows": [{"id": "chat", "on": [{"message": []}],
                   "steps": [{"id": "hi", "say": text}]}],
    }


async def _put(hosting: Hosting, agent_id: str, workspace: str, text: str) -> int:
    document = _document(agent_id, workspace, text)
    result = await hosting.put_version(
        agent_id=agent_id, workspace=workspace, document=document,
        digest=definition_digest(document), activate=True,
    )
    return result.version


def _input(session_id: str, agent_id: str | None, text: str = "hi") -> ParsedInput:
    return ParsedInput(session_id, "message", {"session_id": session_id, "message": text},
                       input_id="m", agent_id=agent_id)


def _state(binding: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if binding is None else {"metadata": {"agent": binding}}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _say(router: RegistryRouter, agent_id: str, session: str = "s") -> list[str]:
    route = await router.route(_input(session, agent_id), None)
    result = await route.agent.turn({"session_id": session, "message": "hi", "id": "m1"})
    return [m.text for m in result.messages]


async def test_a_new_live_version_is_read_after_the_refresh_and_builds_are_bounded(
    store: Store,
) -> None:
    hosting = Hosting(store.engine)
    clock = Clock()
    router = RegistryRouter(hosting, PackSet(), provider=RuleProvider(), cache_size=2,
                            refresh_s=1.0, now=clock)
    for i in range(5):
        await _put(hosting, f"a{i}", "ws", f"a{i} v1")
    assert await _say(router, "a0") == ["a0 v1"]
    await _put(hosting, "a0", "ws", "a0 v2")
    assert await _say(router, "a0") == ["a0 v1"]  # within the refresh: the cached live version
    clock.now = 1.0
    assert await _say(router, "a0") == ["a0 v2"]
    for i in range(5):  # a0 v2 is cached; a1 to a4 are built, each evicting the oldest
        await _say(router, f"a{i}")
    assert router.cached_agents == 2 and router.builds == 6
    # Many turns at once for one evicted version build it once.
    await asyncio.gather(*(router.route(_input(f"s{i}", "a1"), None) for i in range(10)))
    assert router.builds == 7


async def test_one_poll_per_refresh_keeps_every_agent_and_plan_fresh(store: Store) -> None:
    """Looked-up rows stay until a poll of the registry's changes updates them: one poll per
    refresh whatever the number of agents; an unknown id is asked again after the refresh."""
    hosting = Hosting(store.engine)
    clock = Clock()
    router = RegistryRouter(hosting, PackSet(), provider=RuleProvider(), refresh_s=1.0,
                            now=clock)
    for i in range(20):
        await _put(hosting, f"p{i}", f"w{i % 2}", f"p{i} v1")
    for second in range(3):
        clock.now = float(second)
        for i in range(20):
            await router.route(_input("s", f"p{i}"), None)
    assert router.polls == 3
    with pytest.raises(RouteRefused, match="no stored agent"):
        await router.route(_input("s", "late"), None)
    await _put(hosting, "late", "w0", "late")
    await _put(hosting, "p3", "w1", "p3 v2")
    await hosting.set_workspace("w0", agents_enabled=False)
    assert await _say(router, "p3") == ["p3 v1"]  # before the next poll
    clock.now = 3.0
    assert await _say(router, "p3") == ["p3 v2"]
    assert await _say(router, "late") == []  # found now, and its workspace's plan is off
    assert await _say(router, "p4") == []
    assert router.polls == 4


async def test_the_binding_keeps_a_conversation_in_its_workspace(store: Store) -> None:
    hosting = Hosting(store.engine)
    await _put(hosting, "mine", "w1", "mine")
    await _put(hosting, "colleague", "w1", "colleague")
    await _put(hosting, "theirs", "w2", "theirs")
    router = RegistryRouter(hosting, PackSet(), refresh_s=0)
    first = await router.route(_input("s", "mine"), None)
    assert first.binding == {"agent_id": "mine", "workspace": "w1", "version": 1}
    bound = await router.route(_input("s", None), _state(first.binding))
    assert (bound.agent_id, bound.version, bound.workspace) == ("mine", 1, "w1")
    moved = await router.route(_input("s", "colleague"), _state(first.binding))
    assert moved.binding == {"agent_id": "colleague", "workspace": "w1", "version": 1}
    with pytest.raises(RouteRefused) as refused:
        await router.route(_input("s", "theirs"), _state(first.binding))
    assert refused.value.reason == "workspace-mismatch"
    with pytest.raises(RouteRefused) as refused:
        await router.route(_input("s", "MINE"), None)
    assert refused.value.reason == "unknown-agent"
    with pytest.raises(RouteRefused) as refused:
        await router.route(_input("s", None), None)
    assert refused.value.reason == "no-agent"


async def test_the_fallback_agent_answers_conversations_that_name_none(store: Store) -> None:
    hosting = Hosting(store.engine)
    await _put(hosting, "registry", "w1", "registry")
    fallback = SingleAgent(object()).agent
    router = RegistryRouter(hosting, PackSet(), fallback=fallback, refresh_s=0)
    route = await router.route(_input("s", None), None)
    assert route.agent is fallback and route.binding == {"agent_id": None, "workspace": None}
    again = await router.route(_input("s", None), _state(route.binding))
    assert again.agent is fallback
    with pytest.raises(RouteRefused, match="another workspace"):  # never into a workspace
        await router.route(_input("s", "registry"), _state(route.binding))


async def test_a_workspace_whose_plan_excludes_agents_is_gated_alone(store: Store) -> None:
    hosting = Hosting(store.engine)
    await _put(hosting, "off-bot", "off", "should not be said")
    await _put(hosting, "on-bot", "on", "hello")
    await hosting.set_workspace("off", agents_enabled=False)
    router = RegistryRouter(hosting, PackSet(), refresh_s=0)
    assert await _say(router, "off-bot") == []
    assert await _say(router, "on-bot") == ["hello"]


class _Pages:
    def __init__(self) -> None:
        self.searched = 0

    async def search(self, query: str, *, limit: int,
                     allowed_domains: Sequence[str]) -> list[WebResult]:
        self.searched += 1
        return [WebResult("page", "https://example.org/")]


async def test_the_daily_web_search_quota_is_per_workspace(store: Store) -> None:
    hosting = Hosting(store.engine)
    await hosting.set_workspace("small", web_searches_per_day=2, set_web_searches_per_day=True)
    pages = _Pages()
    small = WorkspaceWebSearch(pages, hosting, "small")
    big = WorkspaceWebSearch(pages, hosting, "big")
    for _ in range(2):
        await small.search("q", limit=5, allowed_domains=[])
    with pytest.raises(DailyLimitReached):
        await small.search("q", limit=5, allowed_domains=[])
    for _ in range(5):
        await big.search("q", limit=5, allowed_domains=[])
    assert pages.searched == 7  # the refused search never reached the backend


# -- many workspaces, agents and conversations interleaved (property) -------------------------

_WORKSPACES = ["w", "W", "w ", "\u00e9", "e\u0301"]  # case, space, composed/decomposed
_AGENTS = [(ws, f"{ws}|{n}") for ws in _WORKSPACES for n in ("a", "A")]

_steps = st.lists(
    st.tuples(
        st.integers(0, 5),  # the conversation
        st.one_of(st.none(), st.integers(0, len(_AGENTS) - 1), st.just(-1)),  # -1: unknown
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(_steps)
def test_interleaved_conversations_route_as_a_model_of_the_rules_says(
    database_url: str, steps: list[tuple[int, int | None]]
) -> None:
    asyncio.run(_interleaved(database_url, steps))


async def _interleaved(database_url: str, steps: list[tuple[int, int | None]]) -> None:
    tag = uuid.uuid4().hex[:6]
    store = await Store.connect(database_url, pool_size=2, max_overflow=0)
    try:
        hosting = Hosting(store.engine)
        ids = [(f"{ws}#{tag}", f"{agent}#{tag}") for ws, agent in _AGENTS]
        for ws, agent in ids:
            await _put(hosting, agent, ws, agent)
        router = RegistryRouter(hosting, PackSet(), provider=RuleProvider(), cache_size=3,
                                refresh_s=0)
        bindings: dict[int, dict[str, Any]] = {}
        for conversation, choice in steps:
            named = None if choice is None else (f"nobody#{tag}" if choice == -1
                                                 else ids[choice][1])
            session = f"c{conversation}#{tag}"
            bound = bindings.get(conversation)
            expected: str | tuple[str, str]
            if named is None and bound is None:
                expected = "no-agent"
            elif named is None:
                expected = (bound["agent_id"], bound["workspace"])  # type: ignore[index]
            elif choice == -1:
                expected = "unknown-agent"
            else:
                workspace = ids[choice][0]  # type: ignore[index]
                if bound is not None and bound["workspace"] != workspace:
                    expected = "workspace-mismatch"
                else:
                    expected = (named, workspace)
            try:
                route = await router.route(_input(session, named), _state(bound))
            except RouteRefused as exc:
                assert exc.reason == expected
                continue
            assert (route.agent_id, route.workspace) == expected
            result = await route.agent.turn(
                {"session_id": session, "message": "hi", "id": uuid.uuid4().hex}
            )
            assert [m.text for m in result.messages] == [route.agent_id]
            assert bound is None or route.workspace == bound["workspace"]
            bindings[conversation] = dict(route.binding or {})
        assert router.cached_agents <= 3
    finally:
        await store.close()


async def test_each_agent_searches_its_own_workspaces_knowledge_base(store: Store) -> None:
    """The installed pack's workspace_knowledge gives each agent its own workspace's index."""
    from engine.lifecycle.knowledge import InMemoryWorkspaceKnowledge
    from engine.lifecycle.settings import KnowledgeDocument
    from engine.packs import Pack

    indexes = {
        ws: InMemoryWorkspaceKnowledge(
            [KnowledgeDocument(id=f"{ws}-doc", title=ws, text=f"the {ws} handbook")]
        )
        for ws in ("kb1", "kb2")
    }
    packs = PackSet([Pack(name="kb", workspace_knowledge=indexes.get)])
    hosting = Hosting(store.engine)
    await _put(hosting, "one", "kb1", "x")
    await _put(hosting, "two", "kb2", "x")
    router = RegistryRouter(hosting, packs, refresh_s=0)
    for agent_id, workspace in (("one", "kb1"), ("two", "kb2")):
        route = await router.route(_input("s", agent_id), None)
        assert route.agent.config.lifecycle.workspace_knowledge is indexes[workspace]
