"""Each turn's agent as it answered: rebuilt from the registry version its turn-log row names.

A deployment serving agents from the registry (``AGENT_REGISTRY``) records on every turn the
agent id and the version that ran it. Replaying such a conversation rebuilds that version's
stored document with the installed packs, by the same construction as the consumer, so the
comparison is against exactly what answered, whatever is live now. ``version="live"`` (each
turn's agent at its live version now) or a version number instead replays every turn against
that version of its agent: what activating it changes, or changed.

A turn that names no registry version (an agent loaded from code, ``AGENT``) is replayed by
``fallback`` when one is given; otherwise its conversation is skipped with the reason, as is
one whose version the registry does not hold or no longer builds (a pack it names is not
installed). Replaying changes nothing in the registry or a workspace: no web search takes from
the workspace's daily quota, and the plan check reads the workspace's plan as it is now.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Literal, Protocol

from engine import Agent
from engine.definition import DefinitionError, HostHooks, build_agent, parse_definition
from engine.packs import PackSet
from replay.conversations import Conversation, RecordedTurn
from replay.runner import TurnAgent
from store.hosting import Hosting, RegistryError

__all__ = ["AgentSource", "AgentUnavailable", "RegistryAgents", "VersionChoice"]

VersionChoice = Literal["recorded", "live"] | int


class AgentUnavailable(Exception):
    """A conversation cannot be replayed: the message says which turn and why."""


class AgentSource(Protocol):
    async def for_conversation(self, conversation: Conversation) -> tuple[TurnAgent, list[str]]:
        """Which agent replays each turn of ``conversation``, and a label of each agent used
        (``demo-bike-shop v1``), in the order the turns first use them."""
        ...


class RegistryAgents:
    """Registry agents by ``(agent_id, version)``, built once each per run (the last
    ``cache_size`` kept), and ``fallback`` for turns that name no registry version."""

    def __init__(
        self,
        hosting: Hosting,
        packs: PackSet,
        *,
        version: VersionChoice = "recorded",
        fallback: Agent | None = None,
        cache_size: int = 64,
    ) -> None:
        if isinstance(version, int) and version < 1:
            raise ValueError("a registry version is 1 or more")
        self._hosting = hosting
        self._packs = packs
        self._version = version
        self._fallback = fallback
        self._cache_size = max(cache_size, 1)
        self._built: OrderedDict[tuple[str, int], Agent] = OrderedDict()
        self._live: dict[str, int | None] = {}
        self.builds = 0  # agents built so far (tests read it)

    async def for_conversation(self, conversation: Conversation) -> tuple[TurnAgent, list[str]]:
        chosen: dict[int, Agent] = {}
        labels: list[str] = []
        for turn in conversation.turns:
            if turn.agent_id is None or turn.agent_version is None:
                if self._fallback is None:
                    who = f"agent {turn.agent_id!r}" if turn.agent_id else "an unnamed agent"
                    raise AgentUnavailable(
                        f"turn {turn.version} was answered by {who} with no registry version; "
                        "replay it with --agent module:attribute"
                    )
                chosen[turn.version] = self._fallback
                label = turn.agent_id or self._fallback.name or "the --agent agent"
            else:
                version = await self._version_for(turn)
                chosen[turn.version] = await self._agent(turn.agent_id, version)
                label = f"{turn.agent_id} v{version}"
            if label not in labels:
                labels.append(label)

        def agent_for(turn: RecordedTurn) -> Agent:
            return chosen[turn.version]

        return agent_for, labels

    async def _version_for(self, turn: RecordedTurn) -> int:
        assert turn.agent_id is not None and turn.agent_version is not None
        if self._version == "recorded":
            return turn.agent_version
        if self._version != "live":
            return self._version
        if turn.agent_id not in self._live:
            found = (await self._hosting.live([turn.agent_id])).get(turn.agent_id)
            self._live[turn.agent_id] = found.live_version if found is not None else None
        live = self._live[turn.agent_id]
        if live is None:
            raise AgentUnavailable(
                f"turn {turn.version}: agent {turn.agent_id!r} has no live version in the registry"
            )
        return live

    async def _agent(self, agent_id: str, version: int) -> Agent:
        key = (agent_id, version)
        agent = self._built.get(key)
        if agent is not None:
            self._built.move_to_end(key)
            return agent
        agent = await self._build(agent_id, version)
        self._built[key] = agent
        while len(self._built) > self._cache_size:
            self._built.popitem(last=False)
        return agent

    async def _build(self, agent_id: str, version: int) -> Agent:
        try:
            stored = await self._hosting.version(agent_id, version)
        except RegistryError:
            raise AgentUnavailable(
                f"agent {agent_id!r} version {version} is not in the registry"
            ) from None
        workspace = stored.workspace
        hosting = self._hosting

        async def plan_check(session: object) -> bool:
            plan = await hosting.workspace(workspace)
            return plan is None or plan.agents_enabled

        hooks = HostHooks(
            plan_check=plan_check,
            workspace_knowledge=self._packs.workspace_knowledge(workspace),
        )
        try:
            agent = build_agent(parse_definition(stored.document), self._packs, host=hooks)
        except DefinitionError as exc:
            raise AgentUnavailable(
                f"agent {agent_id!r} version {version} does not build with the installed "
                f"packs: {exc}"
            ) from None
        self.builds += 1
        return agent
