"""The store in pooler mode (``DATABASE_POOLER=transaction``, store/pooler.py): its engine's
options, and its statements and transactions through Debian's PgBouncer in transaction mode."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from consumer.inspect.options import database_pooler
from consumer.inspect.reading import ListFilter, Reader
from store import Store, TimerEntry
from store.pooler import engine_options, startup_settings
from tests.fixtures.pgbouncer import transaction_pooler
from tests.fixtures.postgres import _empty_tables
from tests.store.builders import save_request


def test_direct_connections_keep_their_options() -> None:
    """With no pooler the caller's connect arguments go to asyncpg unchanged, and SQLAlchemy's
    own DBAPI adapter is used."""
    given = {"command_timeout": 5, "server_settings": {"application_name": "a", "jit": "off"}}
    assert engine_options("none", given) == {"connect_args": given}


def test_pooler_mode_names_and_caches_nothing_and_keeps_forwarded_settings() -> None:
    """In transaction mode neither asyncpg nor SQLAlchemy caches a statement, SQLAlchemy's
    are unnamed, and only the startup settings the pooler forwards are sent."""
    args = engine_options(
        "transaction", {"server_settings": {"application_name": "a", "jit": "off"}}
    )["connect_args"]
    assert args["statement_cache_size"] == args["prepared_statement_cache_size"] == 0
    assert args["prepared_statement_name_func"]() == ""
    assert args["server_settings"] == {"application_name": "a"}
    assert startup_settings({"jit": "off"}, "transaction") == {}


def test_an_unknown_pooler_mode_is_refused() -> None:
    """A mode that is neither ``none`` nor ``transaction`` is a ValueError naming both."""
    with pytest.raises(ValueError, match="none, transaction"):
        engine_options("session", {})  # type: ignore[arg-type]


def test_the_inspector_reads_its_pooler_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """``DATABASE_POOLER`` reaches the inspector in any case; unset is ``none``; anything
    else is a ValueError naming the variable."""
    monkeypatch.delenv("DATABASE_POOLER", raising=False)
    assert database_pooler() == "none"
    monkeypatch.setenv("DATABASE_POOLER", "Transaction")
    assert database_pooler() == "transaction"
    monkeypatch.setenv("DATABASE_POOLER", "statement")
    with pytest.raises(ValueError, match="DATABASE_POOLER"):
        database_pooler()


@pytest.fixture
def pooled_url(database_url: str) -> Iterator[str]:
    """The session's database through PgBouncer in transaction mode, two server
    connections for every client."""
    with transaction_pooler(database_url, pool_size=2) as pooler:
        yield pooler.url


@pytest.fixture
async def pooled_store(database_url: str, pooled_url: str) -> AsyncIterator[Store]:
    """A Store in pooler mode through PgBouncer, every table emptied first."""
    await _empty_tables(database_url)
    connected = await Store.connect(pooled_url, pool_size=6, pooler="transaction")
    try:
        yield connected
    finally:
        await connected.close()


async def test_a_direct_store_fails_through_a_transaction_pooler(pooled_url: str) -> None:
    """Without pooler mode, clients sharing PgBouncer's server connections trip over each
    other's prepared statements (why the mode exists)."""
    direct = await Store.connect(pooled_url, pool_size=6)
    try:
        with pytest.raises(DBAPIError, match="prepared statement"):
            for _ in range(20):
                await asyncio.gather(*(direct.timers_pending() for _ in range(6)),
                                     *(direct.load(f"s{i}") for i in range(6)))
    finally:
        await direct.close()


async def test_concurrent_statements_through_the_pooler_each_get_their_own_rows(
    pooled_store: Store,
) -> None:
    """Saves, loads and counts of twelve sessions at once, through two shared server
    connections, all succeed and each load reads its own session's state and version, never
    the rows of another client's statement."""
    async def one(i: int) -> None:
        session_id = f"s{i}"
        for version in range(4):
            saved = await pooled_store.save_turn(
                save_request(session_id, version, replies=[f"{session_id}-{version}"])
            )
            assert saved.version == version + 1
            loaded = await pooled_store.load(session_id)
            assert (loaded.version, loaded.state) == (
                version + 1, {"id": session_id, "data": {"v": version + 1}}
            )
            assert await pooled_store.timers_pending() == 0

    await asyncio.gather(*(one(i) for i in range(12)))


async def test_a_claim_through_the_pooler_holds_its_transaction(pooled_store: Store) -> None:
    """A claim's deletes roll back when its block raises and commit when it ends, and a second
    claimer sees nothing while one holds the timers: the explicit transaction keeps one server
    connection throughout."""
    await pooled_store.upsert_timers([
        TimerEntry(key=k, session_id="s1", at=_past()) for k in "ab"
    ])
    with pytest.raises(RuntimeError):
        async with pooled_store.claim_due(10) as batch:
            assert await batch.delete() == 2
            raise RuntimeError("producer failed")
    assert await pooled_store.timers_pending() == 2
    async with pooled_store.claim_due(10) as held:
        assert len(held.timers) == 2
        async with pooled_store.claim_due(10) as other:
            assert other.timers == []
        await held.delete()
    assert await pooled_store.timers_pending() == 0


async def test_the_inspector_reads_through_the_pooler_read_only(
    database_url: str, pooled_url: str
) -> None:
    """The inspector in pooler mode reads through PgBouncer, and a write on its connections is
    refused: the read-only setting it can no longer send at startup holds per transaction."""
    await _empty_tables(database_url)
    reader = Reader(pooled_url, pool_size=2, pooler="transaction")
    try:
        rows, _ = await reader.conversations(ListFilter())
        assert rows == []
        async with reader._reading() as connection:
            with pytest.raises(DBAPIError, match="read-only"):
                await connection.execute(text("DELETE FROM timers"))
    finally:
        await reader.close()


def _past() -> datetime:
    return datetime.now(UTC) - timedelta(minutes=1)
