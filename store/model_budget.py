"""A workspace's model turns per minute, counted across every consumer.

A plan may cap how many model turns a workspace runs per minute (``PLAN_MODEL_TURNS_PER_MINUTE``)
whatever the number of consumers. The count lives in PostgreSQL, one row per workspace per
minute of the database's clock (``workspace_model_minutes``), and a turn takes one from it with
one statement whose update only happens under the limit, as the daily web-search counter does:
two consumers can never both take the last one. A turn refused here is not run yet: the caller
waits for the next minute and asks again (the turn is neither dropped nor counted twice; one
taken and then not run, because its partition moved meanwhile, stays counted).
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["ModelBudget"]

# One turn taken, only under the limit for the current minute of the database's clock. The
# conflict update re-reads the row it locked, so it is atomic across consumers. It returns the
# seconds left in the minute either way (a refusal returns them through the second branch).
_TAKE = text(
    """
    WITH taken AS (
        INSERT INTO workspace_model_minutes AS m (workspace_id, minute, turns)
        SELECT :workspace, date_trunc('minute', now()), 1 WHERE CAST(:per_minute AS integer) >= 1
        ON CONFLICT (workspace_id, minute) DO UPDATE SET turns = m.turns + 1
        WHERE m.turns < CAST(:per_minute AS integer)
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
        async with self._engine.connect() as connection:
            row = (
                await connection.execute(
                    _TAKE, {"workspace": workspace, "per_minute": per_minute}
                )
            ).one()
        return None if row.taken else max(0.0, float(row.left_s))

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
