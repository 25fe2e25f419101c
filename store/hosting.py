"""Hosting many agents: workspaces and their plans, agents as immutable versions with one live,
the daily web-search counter, and the credit ledger's daily totals.

Ids of any shape (any text a producer or an author chose: unicode, spaces, quotes, look-alike
letters) are bound as parameters and compared exactly; nothing here folds case or trims.

- ``put_version`` stores a checked definition as the agent's next version, unless it equals
  the latest (the same document twice is one version). An agent belongs to one workspace for
  good: a document moving it to another is refused.
- ``activate`` makes a stored version live; rolling back is activating an older one.
- ``take_web_search`` counts one search against the workspace's daily limit atomically across
  every consumer (one UPSERT whose update only happens under the limit), so two consumers can
  never both take the last search.
- The ledger is written by the turn's own save (``store.saving``); ``daily_credits`` reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from store import jsoncodec
from store.errors import RegistryError
from store.registry_input import check_document, check_id

__all__ = [
    "AgentRow",
    "AgentVersion",
    "DailyCredits",
    "Hosting",
    "LiveAgent",
    "PutResult",
    "RegistryError",
    "WorkspacePlan",
]


@dataclass(frozen=True, slots=True)
class PutResult:
    agent_id: str
    workspace: str
    version: int
    created: bool  # False: the document equals the latest version, nothing was stored
    live_version: int | None


@dataclass(frozen=True, slots=True)
class AgentRow:
    agent_id: str
    workspace: str
    live_version: int | None
    latest_version: int
    versions: int


@dataclass(frozen=True, slots=True)
class AgentVersion:
    agent_id: str
    workspace: str
    version: int
    document: dict[str, Any]
    digest: str
    live: bool


@dataclass(frozen=True, slots=True)
class LiveAgent:
    agent_id: str
    workspace: str
    live_version: int | None
    canary_version: int | None = None  # with canary_percent: see consumer/canary.py
    canary_percent: int | None = None
    migrate_to: int | None = None  # with migrate_map: the run map of the last activation
    migrate_map: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class WorkspacePlan:
    workspace: str
    plan: str
    agents_enabled: bool
    web_searches_per_day: int | None


@dataclass(frozen=True, slots=True)
class DailyCredits:
    workspace: str | None
    day: date
    credits: int
    turns: int


_ENSURE_WORKSPACE = text("INSERT INTO workspaces (id) VALUES (:workspace) ON CONFLICT DO NOTHING")
_ENSURE_AGENT = text(
    "INSERT INTO agents (agent_id, workspace_id) VALUES (:agent_id, :workspace) "
    "ON CONFLICT DO NOTHING"
)
_LOCK_AGENT = text(
    "SELECT workspace_id, live_version FROM agents WHERE agent_id = :agent_id FOR UPDATE"
)
_LATEST = text(
    "SELECT version, digest FROM agent_versions WHERE agent_id = :agent_id "
    "ORDER BY version DESC LIMIT 1"
)
_INSERT_VERSION = text(
    "INSERT INTO agent_versions (agent_id, version, document, digest) "
    "VALUES (:agent_id, :version, CAST(:document AS jsonb), :digest)"
)
_SET_LIVE = text(
    "UPDATE agents SET live_version = :version, updated_at = now() WHERE agent_id = :agent_id"
)
_ACTIVATE = text(
    """
    UPDATE agents AS a SET live_version = v.version, canary_version = NULL,
        canary_percent = NULL,
        migrate_to = CASE WHEN CAST(:migrate AS jsonb) IS NULL THEN NULL ELSE v.version END,
        migrate_map = CAST(:migrate AS jsonb), updated_at = now()
    FROM agent_versions AS v
    WHERE a.agent_id = :agent_id AND v.agent_id = a.agent_id AND v.version = :version
    RETURNING a.live_version
    """
)
_LIST = text(
    """
    SELECT a.agent_id, a.workspace_id, a.live_version,
           max(v.version) AS latest, count(v.version) AS versions
    FROM agents AS a JOIN agent_versions AS v ON v.agent_id = a.agent_id
    WHERE CAST(:workspace AS text) IS NULL OR a.workspace_id = CAST(:workspace AS text)
    GROUP BY a.agent_id, a.workspace_id, a.live_version
    ORDER BY a.workspace_id, a.agent_id
    """
)
_VERSION = text(
    """
    SELECT a.workspace_id, a.live_version, v.version, v.document, v.digest
    FROM agents AS a JOIN agent_versions AS v ON v.agent_id = a.agent_id
    WHERE a.agent_id = :agent_id
      AND v.version = coalesce(CAST(:version AS integer), a.live_version)
    """
)
_LIVE = text(
    "SELECT agent_id, workspace_id, live_version, canary_version, canary_percent, migrate_to, "
    "migrate_map FROM agents WHERE agent_id = ANY(:agent_ids)"
)
_SET_CANARY = text(
    """
    UPDATE agents AS a SET canary_version = v.version, canary_percent = :percent,
        updated_at = now()
    FROM agent_versions AS v
    WHERE a.agent_id = :agent_id AND v.agent_id = a.agent_id AND v.version = :version
    RETURNING a.live_version
    """
)
# What changed since a time (the consumers' routers poll it once per refresh, whatever the number
# of agents), with the database's clock to ask from next time: one statement, one round trip.
_CHANGES = text(
    """
    SELECT now() AS now, (
        SELECT coalesce(jsonb_agg(to_jsonb(a)), '[]'::jsonb) FROM (
            SELECT agent_id, workspace_id, live_version, canary_version, canary_percent,
                   migrate_to, migrate_map FROM agents
            WHERE updated_at >= CAST(:since AS timestamptz)
        ) AS a
    ) AS agents, (
        SELECT coalesce(jsonb_agg(to_jsonb(w)), '[]'::jsonb) FROM (
            SELECT id, plan, agents_enabled, web_searches_per_day FROM workspaces
            WHERE updated_at >= CAST(:since AS timestamptz)
        ) AS w
    ) AS plans
    """
)
_WORKSPACE = text(
    "SELECT id, plan, agents_enabled, web_searches_per_day FROM workspaces WHERE id = :workspace"
)
_SET_WORKSPACE = text(
    """
    INSERT INTO workspaces (id, plan, agents_enabled, web_searches_per_day)
    VALUES (:workspace, coalesce(CAST(:plan AS text), 'default'),
            coalesce(CAST(:agents_enabled AS boolean), true), CAST(:per_day AS integer))
    ON CONFLICT (id) DO UPDATE SET
        plan = coalesce(CAST(:plan AS text), workspaces.plan),
        agents_enabled = coalesce(CAST(:agents_enabled AS boolean), workspaces.agents_enabled),
        web_searches_per_day = CASE WHEN CAST(:set_per_day AS boolean)
            THEN CAST(:per_day AS integer) ELSE workspaces.web_searches_per_day END,
        updated_at = now()
    RETURNING id, plan, agents_enabled, web_searches_per_day
    """
)
# One search taken, only under the workspace's limit for the UTC day (NULL or no workspace row:
# no limit). The conflict update re-reads the row it locked, so it is atomic across consumers.
_TAKE_WEB_SEARCH = text(
    """
    INSERT INTO web_search_usage AS u (workspace_id, day, searches)
    SELECT :workspace, CAST(now() AT TIME ZONE 'UTC' AS date), 1
    FROM (SELECT 1) AS one LEFT JOIN workspaces AS w ON w.id = :workspace
    WHERE w.web_searches_per_day IS NULL OR w.web_searches_per_day >= 1
    ON CONFLICT (workspace_id, day) DO UPDATE SET searches = u.searches + 1
    WHERE u.searches < coalesce(
        (SELECT web_searches_per_day FROM workspaces WHERE id = u.workspace_id), 2147483647
    )
    RETURNING searches
    """
)
_WEB_SEARCHES_TODAY = text(
    "SELECT searches FROM web_search_usage "
    "WHERE workspace_id = :workspace AND day = CAST(now() AT TIME ZONE 'UTC' AS date)"
)
_DAILY_CREDITS = text(
    """
    SELECT workspace_id, day, sum(credits) AS credits, count(*) AS turns
    FROM credit_ledger
    WHERE (CAST(:workspace AS text) IS NULL OR workspace_id = CAST(:workspace AS text))
      AND (CAST(:since AS date) IS NULL OR day >= CAST(:since AS date))
      AND (CAST(:until AS date) IS NULL OR day <= CAST(:until AS date))
    GROUP BY workspace_id, day
    ORDER BY day, workspace_id NULLS FIRST
    """
)


class Hosting:
    """The registry, the workspaces, the web-search counter and the ledger's totals."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    async def put_version(
        self,
        *,
        agent_id: str,
        workspace: str,
        document: dict[str, Any],
        digest: str,
        activate: bool = False,
    ) -> PutResult:
        """Store ``document`` (already checked) as the agent's next version; see the module."""
        check_id(agent_id, "agent_id")
        check_id(workspace, "workspace")
        check_document(document)
        async with self._engine.connect() as connection:
            connection = await connection.execution_options(isolation_level="READ COMMITTED")
            async with connection.begin():
                ids = {"agent_id": agent_id, "workspace": workspace}
                await connection.execute(_ENSURE_WORKSPACE, ids)
                await connection.execute(_ENSURE_AGENT, ids)
                owner, live = (await connection.execute(_LOCK_AGENT, ids)).one()
                if owner != workspace:
                    raise RegistryError(
                        f"agent {agent_id!r} belongs to workspace {owner!r}; an agent never "
                        f"moves to another workspace ({workspace!r})"
                    )
                latest = (await connection.execute(_LATEST, ids)).one_or_none()
                if latest is not None and latest.digest == digest:
                    version, created = int(latest.version), False
                else:
                    version, created = (int(latest.version) + 1 if latest else 1), True
                    await connection.execute(
                        _INSERT_VERSION,
                        ids | {"version": version, "document": jsoncodec.dumps(document),
                               "digest": digest},
                    )
                if activate and live != version:
                    await connection.execute(_SET_LIVE, ids | {"version": version})
                    live = version
        return PutResult(agent_id, workspace, version, created, live)

    async def activate(
        self, agent_id: str, version: int, migrate: dict[str, str] | None = None
    ) -> None:
        """Make ``version`` live; the consumers pick it up at each conversation's next turn.
        ``migrate``: a checked run map (``old_flow/old_step`` to ``new_flow/new_step``) kept
        with the activation; None clears the previous one."""
        check_id(agent_id, "agent_id")
        if migrate is not None:
            check_document(migrate, "--migrate")
        params = {"agent_id": agent_id, "version": version,
                  "migrate": None if migrate is None else jsoncodec.dumps(migrate)}
        async with self._engine.connect() as connection:
            row = (await connection.execute(_ACTIVATE, params)).one_or_none()
        if row is None:
            raise RegistryError(f"agent {agent_id!r} has no version {version}")

    async def set_canary(self, agent_id: str, version: int, percent: int) -> None:
        """Send ``percent`` (1-99) of new conversations to ``version``; 100 promotes it (it
        becomes live, the canary is cleared, as ``activate``)."""
        check_id(agent_id, "agent_id")
        if not 1 <= percent <= 100:
            raise RegistryError("--percent must be between 1 and 100")
        if percent == 100:
            await self.activate(agent_id, version)
            return
        current = (await self.live([agent_id])).get(agent_id)
        if current is not None and current.live_version == version:
            raise RegistryError(f"version {version} is already live; a canary is another version")
        async with self._engine.connect() as connection:
            row = (
                await connection.execute(
                    _SET_CANARY, {"agent_id": agent_id, "version": version, "percent": percent}
                )
            ).one_or_none()
        if row is None:
            raise RegistryError(f"agent {agent_id!r} has no version {version}")

    async def list_agents(self, workspace: str | None = None) -> list[AgentRow]:
        async with self._engine.connect() as connection:
            rows = (await connection.execute(_LIST, {"workspace": workspace})).all()
        return [
            AgentRow(r.agent_id, r.workspace_id, r.live_version, int(r.latest), int(r.versions))
            for r in rows
        ]

    async def version(self, agent_id: str, version: int | None = None) -> AgentVersion:
        """A stored version (the live one when ``version`` is None)."""
        check_id(agent_id, "agent_id")
        async with self._engine.connect() as connection:
            row = (
                await connection.execute(_VERSION, {"agent_id": agent_id, "version": version})
            ).one_or_none()
        if row is None:
            which = "live version" if version is None else f"version {version}"
            raise RegistryError(f"agent {agent_id!r} has no {which}")
        return AgentVersion(
            agent_id=agent_id,
            workspace=row.workspace_id,
            version=int(row.version),
            document=row.document,
            digest=row.digest,
            live=row.live_version == row.version,
        )

    async def live(self, agent_ids: Sequence[str]) -> dict[str, LiveAgent]:
        """The workspace and live version of each agent that exists, in one round trip."""
        if not agent_ids:
            return {}
        async with self._engine.connect() as connection:
            rows = (await connection.execute(_LIVE, {"agent_ids": list(agent_ids)})).all()
        return {r.agent_id: _live_agent(r) for r in rows}

    async def changes_since(
        self, since: datetime | None
    ) -> tuple[datetime, list[LiveAgent], list[WorkspacePlan]]:
        """The database's time now, and the agents and workspaces changed at or after
        ``since`` (None: nothing, only the time)."""
        async with self._engine.connect() as connection:
            row = (await connection.execute(_CHANGES, {"since": since})).one()
        agents = _decoded(row.agents)
        plans = _decoded(row.plans)
        return (
            row.now,
            [LiveAgent(a["agent_id"], a["workspace_id"], a["live_version"], a["canary_version"],
                       a["canary_percent"], a["migrate_to"], a["migrate_map"]) for a in agents],
            [WorkspacePlan(w["id"], w["plan"], w["agents_enabled"], w["web_searches_per_day"])
             for w in plans],
        )

    async def workspace(self, workspace: str) -> WorkspacePlan | None:
        async with self._engine.connect() as connection:
            row = (await connection.execute(_WORKSPACE, {"workspace": workspace})).one_or_none()
        return None if row is None else WorkspacePlan(
            row.id, row.plan, row.agents_enabled, row.web_searches_per_day
        )

    async def set_workspace(
        self,
        workspace: str,
        *,
        plan: str | None = None,
        agents_enabled: bool | None = None,
        web_searches_per_day: int | None = None,
        set_web_searches_per_day: bool = False,
    ) -> WorkspacePlan:
        """Create or change a workspace; unset arguments keep their value (the daily limit
        changes only with ``set_web_searches_per_day``, since None means no limit)."""
        check_id(workspace, "workspace")
        if plan is not None:
            check_id(plan, "plan")
        if web_searches_per_day is not None and web_searches_per_day < 0:
            raise RegistryError("web_searches_per_day must be >= 0")
        async with self._engine.connect() as connection:
            row = (
                await connection.execute(
                    _SET_WORKSPACE,
                    {"workspace": workspace, "plan": plan, "agents_enabled": agents_enabled,
                     "per_day": web_searches_per_day, "set_per_day": set_web_searches_per_day},
                )
            ).one()
        return WorkspacePlan(row.id, row.plan, row.agents_enabled, row.web_searches_per_day)

    async def take_web_search(self, workspace: str) -> bool:
        """Count one web search for today; False (nothing counted) past the daily limit."""
        async with self._engine.connect() as connection:
            row = (
                await connection.execute(_TAKE_WEB_SEARCH, {"workspace": workspace})
            ).one_or_none()
        return row is not None

    async def web_searches_today(self, workspace: str) -> int:
        async with self._engine.connect() as connection:
            found = (
                await connection.execute(_WEB_SEARCHES_TODAY, {"workspace": workspace})
            ).scalar()
        return int(found or 0)

    async def daily_credits(
        self,
        *,
        workspace: str | None = None,
        since: date | None = None,
        until: date | None = None,
    ) -> list[DailyCredits]:
        """Credits and billed turns per workspace per UTC day, in one query."""
        async with self._engine.connect() as connection:
            rows = (
                await connection.execute(
                    _DAILY_CREDITS, {"workspace": workspace, "since": since, "until": until}
                )
            ).all()
        return [DailyCredits(r.workspace_id, r.day, int(r.credits), int(r.turns)) for r in rows]


def _decoded(value: Any) -> list[dict[str, Any]]:
    """A jsonb array as the driver gave it: decoded already, or its text."""
    found = jsoncodec.loads(value) if isinstance(value, str | bytes) else value
    return list(found or [])


def _live_agent(row: Any) -> LiveAgent:
    return LiveAgent(row.agent_id, row.workspace_id, row.live_version, row.canary_version,
                     row.canary_percent, row.migrate_to, row.migrate_map)

