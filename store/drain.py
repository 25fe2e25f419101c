"""Where an agent's conversations still wait, per version: the drain view of an activation.

A registry conversation is pinned to the version of its last turn for as long as its session
holds a run (``consumer.hosting.pinning``). This reads the saved sessions of one agent and
counts, per version, the conversations with runs in progress and where those runs wait (flow,
step, status and wait kind), so an operator sees when an old version is drained.

It scans the sessions bound to the agent (``state->'metadata'->'agent'``): an operator's
question asked now and then, not a hot path; there is no index for it. Sessions whose binding
or runs have an unexpected shape are skipped, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from store.registry_input import check_id

__all__ = ["Drain", "VersionDrain", "WaitCount", "drain"]


@dataclass(frozen=True, slots=True)
class WaitCount:
    flow_id: str
    step_id: str
    status: str
    wait: str | None  # the wait kind (timer, event, defer, retry, trigger), None when asking
    runs: int


@dataclass(frozen=True, slots=True)
class VersionDrain:
    version: int
    conversations: int  # conversations with runs in progress, pinned to this version
    waits: tuple[WaitCount, ...]


@dataclass(frozen=True, slots=True)
class Drain:
    agent_id: str
    versions: tuple[VersionDrain, ...]  # only versions with conversations in progress

    def pinned(self, version: int) -> VersionDrain | None:
        return next((v for v in self.versions if v.version == version), None)


# Every expression guards its own cast (SQL does not promise to evaluate ``AND`` in order):
# a binding's version that is not a number in range, or runs that are not an array, count as
# no version and no runs.
_VERSION = """
    CASE WHEN jsonb_typeof(s.state->'metadata'->'agent'->'version') = 'number'
         THEN CASE WHEN (s.state->'metadata'->'agent'->>'version')::numeric
                        BETWEEN 1 AND 2147483647
                   THEN round((s.state->'metadata'->'agent'->>'version')::numeric)::bigint
              END
    END
"""
_RUNS = """
    CASE WHEN jsonb_typeof(s.state->'runs') = 'array' THEN s.state->'runs' ELSE '[]'::jsonb END
"""
_CONVERSATIONS = text(
    f"""
    SELECT v.version, count(*) AS conversations
    FROM sessions AS s
    CROSS JOIN LATERAL (SELECT {_VERSION} AS version, {_RUNS} AS runs) AS v
    WHERE s.state->'metadata'->'agent'->>'agent_id' = :agent_id
      AND v.version IS NOT NULL AND jsonb_array_length(v.runs) > 0
    GROUP BY 1 ORDER BY 1
    """
)
_WAITS = text(
    f"""
    SELECT v.version,
           coalesce(r->>'flow_id', '?') AS flow_id, coalesce(r->>'step_id', '?') AS step_id,
           coalesce(r->>'status', '?') AS status,
           CASE WHEN jsonb_typeof(r->'waiting') = 'object' THEN r->'waiting'->>'kind' END
               AS wait,
           count(*) AS runs
    FROM sessions AS s
    CROSS JOIN LATERAL (SELECT {_VERSION} AS version, {_RUNS} AS runs) AS v
    CROSS JOIN LATERAL jsonb_array_elements(v.runs) AS r
    WHERE s.state->'metadata'->'agent'->>'agent_id' = :agent_id
      AND v.version IS NOT NULL AND jsonb_typeof(r) = 'object'
    GROUP BY 1, 2, 3, 4, 5
    ORDER BY 1, 6 DESC, 2, 3
    """
)


async def drain(engine: AsyncEngine, agent_id: str) -> Drain:
    """The agent's conversations in progress per version, and where their runs wait."""
    check_id(agent_id, "agent_id")
    params = {"agent_id": agent_id}
    async with engine.connect() as connection:
        counts = (await connection.execute(_CONVERSATIONS, params)).all()
        waits = (await connection.execute(_WAITS, params)).all()
    by_version: dict[int, list[WaitCount]] = {}
    for row in waits:
        by_version.setdefault(int(row.version), []).append(
            WaitCount(row.flow_id, row.step_id, row.status, row.wait, int(row.runs))
        )
    return Drain(agent_id, tuple(
        VersionDrain(int(row.version), int(row.conversations),
                     tuple(by_version.get(int(row.version), ())))
        for row in counts
    ))
