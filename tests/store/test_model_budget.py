"""The per-minute budget of model turns per workspace: atomic under concurrency, per workspace,
exact ids, refusals say how long to wait."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from store import Store
from store.model_budget import ModelBudget


async def _clear_of_a_minute_boundary(store: Store) -> None:
    """Wait out the end of the database's current minute when it is near, so a test's takes
    all fall in one minute."""
    async with store.engine.connect() as connection:
        left = (await connection.execute(text(
            "SELECT extract(epoch FROM date_trunc('minute', now()) + interval '1 minute' - now())"
        ))).scalar_one()
    if float(left) < 8:
        await asyncio.sleep(float(left) + 0.2)


async def test_concurrent_takes_never_pass_the_limit(store: Store) -> None:
    """Forty concurrent takes against a limit of seven count exactly seven; the refusals say
    the seconds left in the minute; another workspace (and one differing only in case) has
    its own count; a limit of zero takes nothing."""
    budget = ModelBudget(store.engine)
    await _clear_of_a_minute_boundary(store)
    results = await asyncio.gather(*(budget.take("acme", 7) for _ in range(40)))
    assert sum(r is None for r in results) == 7
    assert all(0 <= r <= 60 for r in results if r is not None)
    assert await budget.used("acme") == 7
    assert await budget.take("ACME", 1) is None
    assert await budget.take("ACME", 1) is not None
    assert await budget.used("ACME") == 1 and await budget.used("acme") == 7
    assert await budget.take("zero", 0) is not None
    assert await budget.used("zero") == 0
    # A higher limit lets the workspace go on within the same minute.
    assert await budget.take("acme", 8) is None
    assert await budget.prune() == 0  # nothing an hour old yet


async def test_a_take_of_several_counts_all_of_them_or_none(store: Store) -> None:
    """Concurrent takes of four against a limit of ten count two of them (eight turns), never
    a part of one; one turn still fits after them; the refusals say the seconds left."""
    budget = ModelBudget(store.engine)
    await _clear_of_a_minute_boundary(store)
    results = await asyncio.gather(*(budget.take_many("many", 10, 4) for _ in range(6)))
    assert sorted(taken for taken, _ in results) == [0, 0, 0, 0, 4, 4]
    assert all(0 <= left <= 60 for _, left in results)
    assert await budget.used("many") == 8
    assert (await budget.take_many("many", 10, 3))[0] == 0
    assert (await budget.take_many("many", 10, 2))[0] == 2
    assert await budget.take("many", 10) is not None
    assert (await budget.take_many("fresh", 3, 4))[0] == 0  # more than the cap: none
    assert await budget.used("fresh") == 0
    with pytest.raises(ValueError):
        await budget.take_many("fresh", 3, 0)
