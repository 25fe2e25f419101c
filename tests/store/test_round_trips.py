"""How many round trips the per-turn calls cost: the load (with the replay check), the save and
the mark of a turn's published rows are one statement each, outside any explicit transaction
(autocommit), so one round trip each on a warm pool."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest
from sqlalchemy import event
from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_connection

from store import SourceRecord, Store, direct
from tests.store.builders import save_request


@pytest.fixture
def sent(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Statements the store executes, plus "BEGIN" for each driver transaction it opens."""
    log: list[str] = []

    def on_statement(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        log.append(statement)

    start = AsyncAdapt_asyncpg_connection._start_transaction

    async def start_transaction(self: Any) -> Any:
        if self.isolation_level != "autocommit":  # the adapter sends BEGIN only then
            log.append("BEGIN")
        return await start(self)

    monkeypatch.setattr(AsyncAdapt_asyncpg_connection, "_start_transaction", start_transaction)

    # The per-turn statements run on the asyncpg connection directly (store/direct.py): they
    # are counted by the store's own hook, and one sent inside a transaction says so.
    def driver_call(name: str) -> Any:
        original = getattr(asyncpg.Connection, name)

        async def call(self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
            if self.is_in_transaction():
                log.append("BEGIN")
            return await original(self, query, *args, **kwargs)

        return call

    for name in ("fetchrow", "execute"):
        monkeypatch.setattr(asyncpg.Connection, name, driver_call(name))
    monkeypatch.setattr(direct, "statement_listeners", [log.append])
    engine = store.engine.sync_engine
    event.listen(engine, "before_cursor_execute", on_statement)
    yield log
    event.remove(engine, "before_cursor_execute", on_statement)


async def test_a_save_is_one_statement_without_a_transaction(store: Store, sent: list[str]) -> None:
    """Creating and then updating a session each send one statement and open no transaction."""
    await store.save_turn(save_request("s1", 0, replies=["a"], outbox=2))
    await store.save_turn(save_request("s1", 1, replies=["b"], outbox=2))
    assert len(sent) == 2
    assert all("INSERT INTO outbox" in sql and "INSERT INTO turns" in sql for sql in sent)


async def test_a_load_is_one_statement(store: Store, sent: list[str]) -> None:
    """Loading a session with its history, its replay check and its unpublished count sends a
    single statement."""
    source = SourceRecord("inbound.turns", 0, 9)
    await store.save_turn(save_request("s1", 0, replies=["a"], source=source))
    sent.clear()
    loaded = await store.load("s1", source=source)
    assert len(sent) == 1
    assert loaded.version == 1 and len(loaded.history) == 2
    assert loaded.applied and loaded.unpublished == 1


async def test_marking_rows_published_is_one_statement(store: Store, sent: list[str]) -> None:
    """Marking a turn's rows published outside a fetch sends one statement, no transaction."""
    saved = await store.save_turn(save_request("s1", 0, outbox=2))
    sent.clear()
    assert await store.mark_published(saved.outbox_ids) == 2
    assert len(sent) == 1 and "BEGIN" not in sent


async def test_a_claim_holds_a_transaction(store: Store, sent: list[str]) -> None:
    """Claiming timers does open a transaction: the instrument sees transactions when they exist."""
    async with store.claim_due(10) as batch:
        await batch.delete()
    assert "BEGIN" in sent
