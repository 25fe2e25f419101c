"""The consumer's database metrics: the timeline and pool gauges read from its store, and
which errors count as the database refusing a write as read-only."""

from __future__ import annotations

import asyncpg
from sqlalchemy.exc import DBAPIError, ProgrammingError

from consumer import metrics
from consumer.failures import database_read_only
from store import Store


def _sample(name: str) -> float:
    value = metrics.REGISTRY.get_sample_value(name)
    assert value is not None, name
    return value


async def test_the_gauges_follow_the_stores_timeline_and_pool(database_url: str) -> None:
    """Once watched, a guarded store's timeline is exported as a number, the pool's size as
    its cap, and a checked-out connection shows in ``turnflow_database_pool_in_use``."""
    store = await Store.connect(database_url, pool_size=3, max_overflow=0, guard_timeline=True)
    try:
        metrics.watch_database(store)
        assert store.timeline is not None
        assert _sample("turnflow_database_timeline") == int(store.timeline, 16) >= 1
        assert _sample("turnflow_database_pool_size") == 3
        idle = _sample("turnflow_database_pool_in_use")
        async with store.engine.connect():
            assert _sample("turnflow_database_pool_in_use") == idle + 1
    finally:
        await store.close()


def test_only_a_read_only_refusal_counts_as_read_only() -> None:
    """SQLSTATE 25006, raw or under SQLAlchemy's error, is read-only; another refusal is not."""
    refused = asyncpg.ReadOnlySQLTransactionError("cannot execute INSERT in a read-only "
                                                  "transaction")
    assert database_read_only(refused)
    assert database_read_only(DBAPIError("INSERT", None, refused))
    other = asyncpg.InsufficientPrivilegeError("permission denied for table sessions")
    assert not database_read_only(ProgrammingError("INSERT", None, other))
    assert not database_read_only(ConnectionRefusedError("down"))
