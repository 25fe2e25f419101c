"""The database's positions: per group and partition, only ever forward."""

from __future__ import annotations

import asyncio

from store import Store


async def test_positions_move_forward_only_and_stay_per_group(store: Store) -> None:
    """A late write (a revoked owner's last one) never takes a position back; another group's
    positions and partitions nobody wrote are apart."""
    await store.save_source_positions("g1", {("in", 0): 10, ("in", 1): 4})
    await store.save_source_positions("g1", {("in", 0): 7, ("in", 1): 9})
    await store.save_source_positions("g2", {("in", 0): 2})
    assert await store.source_positions("g1", [("in", 0), ("in", 1), ("in", 2)]) == {
        ("in", 0): 10, ("in", 1): 9,
    }
    assert await store.source_positions("g2", [("in", 0), ("in", 1)]) == {("in", 0): 2}
    assert await store.source_positions("g3", [("in", 0)]) == {}
    assert await store.source_positions("g1", []) == {}


async def test_concurrent_writers_keep_the_highest(store: Store) -> None:
    """Two owners writing at once during a rebalance: the highest position wins."""
    await asyncio.gather(*(
        store.save_source_positions("g", {("in", 0): offset, ("in", 1): 100 - offset})
        for offset in range(0, 100, 7)
    ))
    assert await store.source_positions("g", [("in", 0), ("in", 1)]) == {
        ("in", 0): 98, ("in", 1): 100,
    }


async def test_an_unguarded_store_never_reports_a_changed_database(store: Store) -> None:
    assert store.database_changed is False
