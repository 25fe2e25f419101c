"""A workspace's model turns per minute, counted across every consumer.

A plan may cap how many model turns a workspace runs per minute (``PLAN_MODEL_TURNS_PER_MINUTE``)
whatever the number of consumers. The count lives in PostgreSQL, one row per workspace per
minute of the database's clock (``workspace_model_minutes``), and a turn takes one from it with
one statement whose update only happens under the limit, as the daily web-search counter does:
two consumers can never both take the last one. A take counts one turn or several at once
(``take_many``: all of them when they fit under the limit, else none), for a consumer that
keeps a few for its workspace's next turns (``consumer.turns.slots``). A turn refused here is
not run yet: the caller waits for the next minute and asks again (the turn is neither dropped
nor counted twice; one taken and then not run, because its partition moved meanwhile or the
minute ended before the consumer used it, stays counted).
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["ModelBudget"]

# ``:wanted`` turns taken at once, only when all of them fit under the limit for the current
# minute of the database's clock. The conflict update re-reads the row it locked, so it is
# atomic across consumers. It returns the seconds left in the minute either way (a refusal
# returns them through the second branch).
_TAKE = text(
    """
    WITH taken AS (
        INSERT INTO workspace_model_minutes AS m (workspace_id, minute, turns)
        SELECT :workspace, date_trunc('minute', now()), CAST(:wanted AS integer)
        WHERE CAST(:per_minute AS integer) >= CAST(:wanted AS integer)
        ON CONFLICT (workspace_id, minute) DO UPDATE SET turns = m.turns + excluded.turns
        WHERE m.turns + excluded.turns <= CAST(:per_minute AS integer)
        RETURNING turns
    )
    SELECT (SELECT count(*) FROM taken) AS taken,
           extract(epoch FROM date_trunc('minute', now()) + interval '1 minute' - now()) AS left_s
    """
)
_USED = text(
    "SELECT turns FROM workspace_model_minutes "
    "WHERE workspace_id = :workspace AND minute = date_trunc('minute', now())"
)
_PRUNE = text(
    "DELETE FROM workspace_model_minutes WHERE minute < now() - interval '1 hour'"
)


class ModelBudget:
    """The per-minute counter of model turns per workspace (the engine runs in autocommit, as
    the store's: each statement is its own transaction)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def take(self, workspace: str, per_minute: int) -> float | None:
        """Count one turn this minute; None when taken, else the seconds until the next minute
        (nothing counted: the workspace used its ``per_minute`` already)."""
        taken, left_s = await self.take_many(workspace, per_minute, 1)
        return None if taken else left_s

    async def take_many(self, workspace: str, per_minute: int, wanted: int) -> tuple[int, float]:
        """Count ``wanted`` turns this minute when all of them fit under ``per_minute``, else
        none: how many were counted (``wanted`` or 0) and the seconds left in the minute."""
        if wanted < 1:
            raise ValueError("wanted must be at least 1")
        async with self._engine.connect() as connection:
            row = (
                await connection.execute(
                    _TAKE, {"workspace": workspace, "per_minute": per_minute, "wanted": wanted}
                )
            ).one()
        return (wanted if row.taken else 0), max(0.0, float(row.left_s))

    async def used(self, workspace: str) -> int:
        """Turns the workspace took this minute."""
        async with self._engine.connect() as connection:
            found = (await connection.execute(_USED, {"workspace": workspace})).scalar()
        return int(found or 0)

    async def prune(self) -> int:
        """Delete the counts of minutes over an hour old; how many rows went."""
        async with self._engine.connect() as connection:
            result = await connection.execute(_PRUNE)
        return int(result.rowcount or 0)
