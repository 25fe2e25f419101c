"""The throwaway benchmark database: created migrated on DATABASE_URL's server, dropped after."""

from __future__ import annotations

import asyncio
from contextlib import ExitStack

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from bench.harness.databases import scratch_database
from store.urls import plain_url


async def _scalar(url: str, sql: str, *args: object) -> object:
    connection = await asyncpg.connect(url)
    try:
        return await connection.fetchval(sql, *args)
    finally:
        await connection.close()


def test_scratch_database_is_migrated_and_dropped_with_the_stack(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database carries the migrated tables while the stack is open and is gone after."""
    # The session's own test server stands in for the operator's DATABASE_URL.
    server_url = plain_url(database_url)
    monkeypatch.setenv("DATABASE_URL", server_url)
    with ExitStack() as stack:
        database = scratch_database(stack, prefix="turnflow-test-scratch")
        assert database.where == "DATABASE_URL"
        name = make_url(database.url).database
        assert name is not None and name.startswith("turnflow_test_scratch_")
        assert len(name) == len("turnflow_test_scratch_") + 8
        tables = asyncio.run(_scalar(
            database.url, "SELECT count(*) FROM pg_tables WHERE tablename = 'alembic_version'"
        ))
        assert tables == 1
    left = asyncio.run(_scalar(
        server_url, "SELECT count(*) FROM pg_database WHERE datname = $1", name
    ))
    assert left == 0
