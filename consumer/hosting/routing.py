"""Which agent answers an input: the deployment's one agent (``AGENT``), or a registry agent.

In a registry deployment (``AGENT_REGISTRY``) a record names its agent (``agent_id``), or its
conversation is bound to the agent that answered it before: the binding is kept in the
session (``metadata["agent"]``: the agent id and its workspace) and saved with every turn.

- A conversation never changes workspace: a record naming an agent of another workspace than
  the one the conversation is bound to is refused (``RouteRefused``, dead-lettered with the
  reason), whatever the agent. Naming another agent of the same workspace moves the binding.
- Ids are compared exactly, as stored: no case folding, trimming or normalisation.
- An agent's live version and a workspace's plan are read once when first needed and then kept
  fresh by one poll per ``refresh_s`` of what changed in the registry since the last poll
  (``store.hosting.changes_since``): its cost does not grow with the number of agents, and a
  newly activated version answers each conversation's next turn after the poll, on every
  consumer, without a restart. An id the registry does not know is asked again after
  ``refresh_s``. Built agents live in a bounded LRU cache keyed by agent and version (and the
  looked-up rows in one a few times larger): memory does not grow with the number of agents.
- A registry agent's plan check reads its workspace's plan from that copy, its web search
  counts against the workspace's daily limit (``store.hosting.take_web_search``), and its
  ``search_knowledge`` without sources of its own reads its workspace's Knowledge Base (the
  installed pack's ``workspace_knowledge(workspace)``), never another's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from consumer import metrics
from consumer.hosting.canary import choose_version
from consumer.hosting.pinning import pinned_version
from consumer.inputs import ParsedInput
from engine.definition import DefinitionError, HostHooks, build_agent, parse_definition
from engine.lifecycle.web_search import DailyLimitReached
from engine.packs import PackSet
from store.hosting import Hosting, LiveAgent, RegistryError, WorkspacePlan

log = logging.getLogger("turnflow.routing")

__all__ = [
    "BINDING_KEY",
    "AgentRouter",
    "RegistryRouter",
    "Route",
    "RouteRefused",
    "SingleAgent",
    "agent_label",
    "registry_router",
]

BINDING_KEY = "agent"
"""Where a conversation's binding lives in ``session.metadata``."""


def registry_router(settings: Any, store: Any, fallback: Any = None) -> RegistryRouter:
    """The service's router for ``AGENT_REGISTRY``: the packs of ``PACKS``, one provider from
    the environment shared by every agent (recorded like ``AGENT``'s), ``fallback`` for
    conversations that name no agent."""
    from consumer.hosting.packs import load_packs
    from consumer.model_calls import observe_model_calls
    from engine.clock import SystemClock
    from engine.providers import provider_from_env
    from engine.providers.http import DEFAULT_CONNECTIONS
    from engine.recording import recorded_agent

    def prepare(agent: Any) -> Any:
        observe_model_calls(agent)  # once per provider: it is marked after the first
        return recorded_agent(agent)

    return RegistryRouter(
        Hosting(store.engine),
        load_packs(settings.packs),
        # as many kept-alive connections as turns call the model at once (MAX_IN_FLIGHT)
        provider=provider_from_env(
            connections=max(DEFAULT_CONNECTIONS, settings.max_in_flight)
        ),
        clock=SystemClock(),
        fallback=fallback,
        cache_size=settings.agent_cache_size,
        refresh_s=settings.agent_refresh_ms / 1000,
        prepare=prepare,
        fallback_message=settings.model_fallback_message,
    )


class RouteRefused(Exception):
    """The input cannot be answered by any agent: ``reason`` is the DLQ code, the message a
    content-free sentence."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True)
class Route:
    """The agent that answers one turn and what the turn log and the ledger record of it.
    ``binding`` is written into the session's metadata when not None."""

    agent: Any
    agent_id: str | None
    version: int | None = None
    workspace: str | None = None
    binding: dict[str, Any] | None = None
    # The workspace's plan when the route was taken (its turn slot's weight and cap).
    plan: str | None = None
    pin_lost: str | None = None
    """Why the version the conversation was pinned to could not run this turn
    (``version-deleted``, ``version-invalid``), or None."""
    role: str | None = None
    """How the version was chosen, for the per-version counters: ``live``, ``canary``,
    ``pinned`` (the conversation's runs started on it) or ``pin_lost``; None for ``AGENT``."""
    migrate_runs: dict[str, str] | None = None
    """The run map the turn applies first (``engine.phases.migrate``): the conversation moved
    from its pinned version to the live one by the activation's ``--migrate`` map."""
    fallback: dict[str, Any] | None = None
    """The turn's ``fallback`` request when its runs cannot continue (``pin_lost`` on a
    customer message or a timer's wake): they end ``version-gone`` and the fallback answers."""


class AgentRouter(Protocol):
    async def route(self, parsed: ParsedInput, state: dict[str, Any] | None) -> Route: ...


def agent_label(agent: Any) -> str | None:
    """The id a plain agent's turns are logged under: its lifecycle ``agent_id``, else name."""
    config = getattr(agent, "config", None)
    lifecycle = getattr(config, "lifecycle", None)
    agent_id = getattr(lifecycle, "agent_id", None)
    if isinstance(agent_id, str) and agent_id:
        return agent_id
    name = getattr(agent, "name", None)
    return name if isinstance(name, str) else None


class SingleAgent:
    """``AGENT``: one agent answers every input; nothing is bound."""

    def __init__(self, agent: Any) -> None:
        self._route = Route(agent=agent, agent_id=agent_label(agent))

    @property
    def agent(self) -> Any:
        return self._route.agent

    async def route(self, parsed: ParsedInput, state: dict[str, Any] | None) -> Route:
        return self._route


def binding_of(state: dict[str, Any] | None) -> dict[str, Any] | None:
    """The conversation's binding, or None (a new conversation, or one never bound)."""
    metadata = state.get("metadata") if isinstance(state, dict) else None
    binding = metadata.get(BINDING_KEY) if isinstance(metadata, dict) else None
    return binding if isinstance(binding, dict) else None


class WorkspaceWebSearch:
    """A pack's web search backend behind the workspace's daily limit: each search takes one
    from the workspace's counter first; past the limit ``DailyLimitReached`` (the tool answers
    the documented error and nothing is searched)."""

    def __init__(self, backend: Any, hosting: Hosting, workspace: str) -> None:
        self._backend = backend
        self._hosting = hosting
        self._workspace = workspace

    async def search(self, query: str, *, limit: int, allowed_domains: Any) -> Any:
        if not await self._hosting.take_web_search(self._workspace):
            raise DailyLimitReached(self._workspace)
        return await self._backend.search(query, limit=limit, allowed_domains=allowed_domains)


# How far back each poll of the registry's changes reaches before the previous poll's time: a
# change whose transaction took its ``now()`` before that poll but committed after it is still
# seen by the next one.
CHANGES_MARGIN = timedelta(seconds=10)


class _Rows:
    """Looked-up registry rows by id, at most ``size`` (least recently used dropped first).
    A row found stays until a poll changes it; an id not found (None) is asked again after
    ``ttl_s``."""

    def __init__(self, ttl_s: float, size: int, now: Callable[[], float]) -> None:
        self._ttl = ttl_s
        self._size = size
        self._now = now
        self._entries: OrderedDict[str, tuple[float, Any]] = OrderedDict()

    def get(self, key: str) -> tuple[bool, Any]:
        found = self._entries.get(key)
        if found is None or (found[1] is None and self._now() - found[0] >= self._ttl):
            return False, None
        self._entries.move_to_end(key)
        return True, found[1]

    def put(self, key: str, value: Any) -> None:
        self._entries[key] = (self._now(), value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def update(self, key: str, value: Any) -> None:
        """A poll's newer row, kept only when the id is looked up here already."""
        if key in self._entries:
            self._entries[key] = (self._entries[key][0], value)


def _migration(
    live: LiveAgent, pinned: int | None, state: dict[str, Any] | None
) -> dict[str, str] | None:
    """The part of the live version's run map this conversation's runs need, when the
    conversation is pinned to an older version and the map names every one of its runs; else
    None (a run the map does not name keeps the whole conversation pinned)."""
    mapping = live.migrate_map
    if (pinned is None or not mapping or live.migrate_to != live.live_version
            or pinned == live.live_version):
        return None
    runs = state.get("runs") if isinstance(state, dict) else None
    if not isinstance(runs, list):
        return None
    needed: dict[str, str] = {}
    for run in runs:
        key = f"{run.get('flow_id')}/{run.get('step_id')}" if isinstance(run, dict) else None
        target = mapping.get(key) if key is not None else None
        if not isinstance(target, str):
            return None
        needed[key] = target  # type: ignore[index]
    return needed


class RegistryRouter:
    """Agents from the registry, by the record's ``agent_id`` or the conversation's binding;
    ``fallback`` (``AGENT``) answers conversations that name none."""

    def __init__(
        self,
        hosting: Hosting,
        packs: PackSet,
        *,
        provider: Any = None,
        clock: Any = None,
        fallback: Any = None,
        cache_size: int = 256,
        refresh_s: float = 1.0,
        prepare: Callable[[Any], Any] = lambda agent: agent,
        now: Callable[[], float] = time.monotonic,
        fallback_message: str = "Sorry, something went wrong on our side. Please try again.",
    ) -> None:
        if cache_size < 1:
            raise ValueError("cache_size must be >= 1")
        self._hosting = hosting
        self._packs = packs
        self._provider = provider
        self._clock = clock
        self._fallback = Route(
            agent=fallback, agent_id=agent_label(fallback),
            binding={"agent_id": None, "workspace": None},
        ) if fallback is not None else None
        self._cache_size = cache_size
        self._prepare = prepare
        self._refresh_s = refresh_s
        self._now = now
        self._fallback_message = fallback_message
        self._live = _Rows(refresh_s, cache_size * 4, now)
        self._plans = _Rows(refresh_s, cache_size * 4, now)
        self._polled_at: float | None = None  # this process's clock
        self._polled_db: datetime | None = None  # the database's clock at that poll
        self._polling = asyncio.Lock()
        self._built: OrderedDict[tuple[str, int], Any] = OrderedDict()
        self._building: dict[tuple[str, int], asyncio.Future[Any]] = {}
        self.builds = 0  # agents built so far (the bench and tests read it)
        self.polls = 0  # polls of the registry's changes so far

    @property
    def cached_agents(self) -> int:
        return len(self._built)

    async def route(self, parsed: ParsedInput, state: dict[str, Any] | None) -> Route:
        binding = binding_of(state)
        named = parsed.agent_id
        if named is None and binding is not None:
            bound = binding.get("agent_id")
            named = bound if isinstance(bound, str) else None
            if named is None:  # bound to the fallback agent
                return self._fallback_route()
        if named is None:
            return self._fallback_route()
        live = await self._live_agent(named)
        if live is None:
            raise RouteRefused("unknown-agent", "agent_id names no stored agent")
        if binding is not None and binding.get("workspace") != live.workspace:
            raise RouteRefused(
                "workspace-mismatch",
                "agent_id names an agent of another workspace than the conversation's",
            )
        plan = await self._plan(live.workspace)
        plan_name = plan.plan if plan is not None else None
        pinned = pinned_version(binding, state, live.agent_id)
        pin_lost: str | None = None
        moved = _migration(live, pinned, state)
        if moved is not None and live.live_version is not None:
            agent = await self._agent(live.agent_id, live.live_version, live.workspace)
            metrics.child(metrics.AGENT_VERSION_ROUTES, "live").inc()
            return dataclasses.replace(self._route(live, live.live_version, agent, plan_name),
                                       role="live", migrate_runs=moved)
        if pinned is not None and pinned != live.live_version:
            try:
                agent = await self._agent(live.agent_id, pinned, live.workspace)
            except (RegistryError, RouteRefused) as exc:
                pin_lost = "version-deleted" if isinstance(exc, RegistryError) else (
                    "version-invalid"
                )
                metrics.child(metrics.AGENT_VERSION_ROUTES, "pin_lost").inc()
                log.warning(
                    "pinned agent version cannot run; the turn runs on the live version",
                    extra={"session_id": parsed.session_id, "agent_id": live.agent_id,
                           "pinned_version": pinned, "live_version": live.live_version,
                           "reason": pin_lost},
                )
            else:
                metrics.child(metrics.AGENT_VERSION_ROUTES, "pinned").inc()
                route = self._route(live, pinned, agent, plan_name)
                return dataclasses.replace(route, role="pinned")
        version, canary = choose_version(
            live.agent_id, parsed.session_id, live.live_version, live.canary_version,
            live.canary_percent,
        )
        if version is None:
            raise RouteRefused("agent-not-live", "the agent has no live version")
        try:
            agent = await self._agent(live.agent_id, version, live.workspace)
        except (RegistryError, RouteRefused):
            if not canary or live.live_version is None:
                raise
            # A canary that does not build never refuses a conversation: the live version.
            version, canary = live.live_version, False
            agent = await self._agent(live.agent_id, version, live.workspace)
        if pin_lost is None:
            role = "canary" if canary else "live"
            metrics.child(metrics.AGENT_VERSION_ROUTES, role).inc()
            return dataclasses.replace(self._route(live, version, agent, plan_name), role=role)
        fallback = None
        if parsed.kind in ("message", "wake"):  # answered, never dropped: see Route.fallback
            fallback = {"reason": f"pinned-{pin_lost}", "message": self._fallback_message,
                        "end_runs": True}
        return dataclasses.replace(
            self._route(live, version, agent, plan_name), pin_lost=pin_lost, fallback=fallback,
            role="pin_lost",
        )

    @staticmethod
    def _route(live: LiveAgent, version: int, agent: Any, plan: str | None) -> Route:
        """The route of a turn on ``version``; the binding pins the conversation to it while
        the turn leaves runs in progress (``consumer.hosting.pinning``). ``plan``: the
        workspace's plan now (its turn slot's weight and cap)."""
        return Route(
            agent=agent,
            agent_id=live.agent_id,
            version=version,
            workspace=live.workspace,
            binding={"agent_id": live.agent_id, "workspace": live.workspace,
                     "version": version},
            plan=plan,
        )

    def _fallback_route(self) -> Route:
        if self._fallback is None:
            raise RouteRefused(
                "no-agent", "the record names no agent_id and its conversation has none"
            )
        return self._fallback

    async def _poll(self) -> None:
        """Bring the looked-up rows up to date, at most once per ``refresh_s``."""
        if self._polled_at is not None and self._now() - self._polled_at < self._refresh_s:
            return
        async with self._polling:
            if self._polled_at is not None and self._now() - self._polled_at < self._refresh_s:
                return
            since = None if self._polled_db is None else self._polled_db - CHANGES_MARGIN
            db_now, agents, plans = await self._hosting.changes_since(since)
            for live in agents:
                self._live.update(live.agent_id, live)
            for plan in plans:
                self._plans.update(plan.workspace, plan)
            self._polled_db = db_now
            self._polled_at = self._now()
            self.polls += 1

    async def _live_agent(self, agent_id: str) -> LiveAgent | None:
        await self._poll()
        known, live = self._live.get(agent_id)
        if not known:
            live = (await self._hosting.live([agent_id])).get(agent_id)
            self._live.put(agent_id, live)
        return live  # type: ignore[no-any-return]

    async def _plan(self, workspace: str) -> WorkspacePlan | None:
        await self._poll()
        known, plan = self._plans.get(workspace)
        if not known:
            plan = await self._hosting.workspace(workspace)
            self._plans.put(workspace, plan)
        return plan  # type: ignore[no-any-return]

    async def _agent(self, agent_id: str, version: int, workspace: str) -> Any:
        key = (agent_id, version)
        agent = self._built.get(key)
        if agent is not None:
            self._built.move_to_end(key)
            return agent
        pending = self._building.get(key)
        if pending is not None:  # another turn is building it: one build, shared
            return await asyncio.shield(pending)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._building[key] = future
        try:
            agent = await self._build(agent_id, version, workspace)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a build nobody else awaited logs no warning
            raise
        finally:
            self._building.pop(key, None)
        future.set_result(agent)
        self._built[key] = agent
        while len(self._built) > self._cache_size:
            self._built.popitem(last=False)
        return agent

    async def _build(self, agent_id: str, version: int, workspace: str) -> Any:
        stored = await self._hosting.version(agent_id, version)
        if stored.workspace != workspace:  # cannot happen: an agent never moves
            raise RouteRefused("workspace-mismatch", "the stored version names another workspace")

        async def plan_check(session: Any) -> bool:
            plan = await self._plan(workspace)
            return plan is None or plan.agents_enabled

        hooks = HostHooks(
            plan_check=plan_check,
            wrap_web_search=lambda backend: WorkspaceWebSearch(backend, self._hosting, workspace),
            workspace_knowledge=self._packs.workspace_knowledge(workspace),
        )
        try:
            definition = parse_definition(stored.document)
            agent = build_agent(
                definition, self._packs, provider=self._provider, clock=self._clock, host=hooks
            )
        except DefinitionError as exc:
            # Checked when stored; refused now only if the deployment's packs changed since.
            raise RouteRefused("agent-invalid", f"the live version does not build: {exc}") from None
        self.builds += 1
        return self._prepare(agent)
