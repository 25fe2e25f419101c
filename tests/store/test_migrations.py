"""The alembic migrations: up to head, down to base, and up again, on a scratch database."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from store import migrate
from store.schema import TABLE_NAMES
from tests.store.migration_dbs import execute as _admin
from tests.store.migration_dbs import off_loop as _off_loop
from tests.store.migration_dbs import rows as _rows
from tests.store.migration_dbs import scratch_url

__all__ = ["scratch_url"]  # the fixture, shared with the other migration tests


def _tables(url: str) -> set[str]:
    async def read() -> set[str]:
        connection = await asyncpg.connect(url)
        try:
            rows = await connection.fetch(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            )
            return {r["tablename"] for r in rows}
        finally:
            await connection.close()

    return _off_loop(asyncio.run, read())


def test_migrations_go_up_down_and_up_again(scratch_url: str) -> None:
    """Upgrade creates every table, downgrade to base removes them all, upgrade restores them."""
    head = migrate.head()
    assert _off_loop(migrate.current, scratch_url) is None

    _off_loop(migrate.upgrade, scratch_url)
    assert _off_loop(migrate.current, scratch_url) == head
    assert set(TABLE_NAMES) <= _tables(scratch_url)

    _off_loop(migrate.downgrade, scratch_url, "base")
    assert _off_loop(migrate.current, scratch_url) is None
    assert not set(TABLE_NAMES) & _tables(scratch_url)

    _off_loop(migrate.upgrade, scratch_url)
    assert _off_loop(migrate.current, scratch_url) == head
    assert set(TABLE_NAMES) <= _tables(scratch_url)


async def test_upgrade_async_works_inside_an_event_loop(scratch_url: str) -> None:
    """Async callers can migrate without blocking or nesting event loops."""
    await migrate.upgrade_async(scratch_url)
    assert set(TABLE_NAMES) <= await asyncio.to_thread(_tables, scratch_url)
    await migrate.downgrade_async(scratch_url)
    assert not set(TABLE_NAMES) & await asyncio.to_thread(_tables, scratch_url)


def test_the_migrated_schema_matches_the_store_metadata(database_url: str) -> None:
    """Alembic's autogenerate finds no difference between the migrations and store.schema."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy.ext.asyncio import create_async_engine
    from sqlalchemy.pool import NullPool

    from store.schema import metadata
    from store.urls import async_url

    async def diff() -> list[object]:
        engine = create_async_engine(async_url(database_url), poolclass=NullPool)
        try:
            async with engine.connect() as connection:
                return await connection.run_sync(
                    lambda sync: compare_metadata(MigrationContext.configure(sync), metadata)
                )
        finally:
            await engine.dispose()

    # The search's expression indexes are made by the migration only (store.search_text):
    # alembic compares an expression index by the text PostgreSQL prints back.
    from store.search_text import INDEXES

    found = _off_loop(asyncio.run, diff())
    assert [d for d in found if not (
        isinstance(d, tuple) and d[0] == "remove_index" and d[1].name in INDEXES
    ) and not _of_a_partition(d)] == []


def _of_a_partition(difference: object) -> bool:
    """A turn log partition (store/partitions.py), made by the migration and the service, not
    declared: each is the parent's columns and indexes."""
    if not isinstance(difference, tuple):
        return False
    kind, thing = difference[0], difference[1]
    table = getattr(thing, "table", thing)
    return kind in ("remove_table", "remove_index") and str(getattr(table, "name", "")).startswith(
        "turns_p")


def _waiting_session(session_id: str, key: str, at: str) -> str:
    """A session saved before keys carried their conversation: run ``r1`` waits on ``key``."""
    import json

    state = {
        "id": session_id, "v": 4, "version": 1, "seq": 1, "data": {}, "claims": {},
        "inputs": ["m1"], "metadata": {},
        "runs": [{
            "id": "r1", "flow_id": "order", "status": "waiting", "step_id": "wait", "visit": 2,
            "waiting": {"key": key, "kind": "timer", "at": at},
            "started_at": "2026-01-05T09:00:00Z",
        }],
    }
    return json.dumps(state).replace("'", "''")


def test_upgrading_keeps_every_timer_and_restores_the_ones_taken_over(scratch_url: str) -> None:
    """A database from before timers were per conversation: five sessions waited on the same
    key ``r1:wait:2`` but only the last writer's row survived. After the upgrade every waiting
    session has its own timer at its own time, the surviving row is kept as it was, and other
    timers (a silence wake) are untouched."""
    _off_loop(migrate.upgrade, scratch_url, "0002")
    sessions = [f"s{i}" for i in range(5)]
    for i, session_id in enumerate(sessions):
        at = f"2026-01-05T09:0{i}:00+00:00"
        _admin(
            scratch_url,
            "INSERT INTO sessions (id, version, state) VALUES "
            f"('{session_id}', 1, '{_waiting_session(session_id, 'r1:wait:2', at)}'::jsonb)",
        )
    _admin(
        scratch_url,
        "INSERT INTO timers (key, session_id, at) VALUES"
        " ('r1:wait:2', 's4', '2026-01-05T09:04:00+00:00'),"
        " ('silence:nudge:s0:1', 's0', '2026-01-05T10:00:00+00:00')",
    )

    _off_loop(migrate.upgrade, scratch_url)

    rows = _rows(scratch_url, "SELECT session_id, key, extract(epoch FROM at) FROM timers")
    base = 1767603600  # 2026-01-05T09:00:00Z
    assert sorted(rows) == sorted(
        [(s, "r1:wait:2", base + 60 * i) for i, s in enumerate(sessions)]
        + [("s0", "silence:nudge:s0:1", base + 3600)]
    )
    # The pair is the key now: the same key may be set again for another session.
    _admin(
        scratch_url,
        "INSERT INTO timers (key, session_id, at) VALUES ('r1:wait:2', 's9', now())",
    )
    with pytest.raises(asyncpg.UniqueViolationError):
        _admin(
            scratch_url,
            "INSERT INTO timers (key, session_id, at) VALUES ('r1:wait:2', 's9', now())",
        )


def test_input_ids_are_backfilled_from_the_stored_inputs(scratch_url: str) -> None:
    """Upgrading fills turns.input_id from each turn's input (message id, event:key, start:key,
    none for wakes), keeps it on the earliest of repeated ids only, and builds the index."""
    _off_loop(migrate.upgrade, scratch_url, "0002")
    rows = [
        ("a", 1, {"session_id": "a", "message": "hi", "id": "m1"}),
        ("a", 2, {"session_id": "a", "wake": "k"}),
        ("a", 3, {"session_id": "a", "event": "paid", "key": "e1"}),
        ("a", 4, {"session_id": "a", "start": {"flow": "f", "key": "s1"}}),
        ("a", 5, {"session_id": "a", "message": "again", "id": "m1"}),  # answered twice before
        ("a", 6, {"session_id": "a", "message": "no id"}),
        ("a", 7, {"session_id": "a", "message": "pct", "id": "50%"}),
        ("b", 1, {"session_id": "b", "message": "hi", "id": "m1"}),
    ]

    async def seed_and_read() -> list[tuple[str, int, str | None]]:
        import json

        connection = await asyncpg.connect(scratch_url)
        try:
            for session_id, version, turn_input in rows:
                await connection.execute(
                    "INSERT INTO turns (session_id, version, input) VALUES ($1, $2, $3::jsonb)",
                    session_id, version, json.dumps(turn_input),
                )
            await connection.close()
            await asyncio.to_thread(_off_loop, migrate.upgrade, scratch_url)
            connection = await asyncpg.connect(scratch_url)
            found = await connection.fetch(
                "SELECT session_id, version, input_id FROM turns ORDER BY session_id, version"
            )
            return [(r["session_id"], r["version"], r["input_id"]) for r in found]
        finally:
            await connection.close()

    assert _off_loop(asyncio.run, seed_and_read()) == [
        ("a", 1, "m1"), ("a", 2, None), ("a", 3, "event:e1"), ("a", 4, "start:s1"),
        ("a", 5, None), ("a", 6, None), ("a", 7, "50%25"), ("b", 1, "m1"),
    ]


async def test_the_turn_log_is_partitioned_online_without_rewriting_it(scratch_url: str) -> None:
    """A log of 20,000 turns made before 0023 is converted while turns keep being written: no
    write fails or waits a second, the old table becomes the first partition as it is on disk
    (same file, so no rewrite), its rows read back, and ids go on after its last."""
    import time
    from datetime import UTC, datetime, timedelta

    from store import Store, partitions

    await migrate.upgrade_async(scratch_url, "0022")
    connection = await asyncpg.connect(scratch_url)
    try:
        await connection.execute("""
            INSERT INTO sessions (id, version, state)
            SELECT 'old-' || g, 20, '{"data": {}}'::jsonb FROM generate_series(1, 1000) AS g;
            INSERT INTO turns (session_id, version, input, messages, source_topic,
                               source_partition, source_offset, input_id)
            SELECT 'old-' || (g % 1000 + 1), g / 1000 + 1,
                   jsonb_build_object('message', 'oi ' || g), '[]'::jsonb,
                   'inbound.turns', 0, g, 'm' || g
            FROM generate_series(0, 19999) AS g""")
        file_before = await connection.fetchval("SELECT pg_relation_filenode('turns')")
        last_id = await connection.fetchval("SELECT max(id) FROM turns")
    finally:
        await connection.close()

    writing = True
    waits: list[float] = []

    async def write() -> None:
        writer = await asyncpg.connect(scratch_url)
        try:
            n = 0
            while writing:
                n += 1
                started = time.monotonic()
                await writer.execute(
                    "INSERT INTO turns (session_id, version, input) VALUES ($1, 1, '{}')",
                    f"during-{n}")
                waits.append(time.monotonic() - started)
                await asyncio.sleep(0.005)
        finally:
            await writer.close()

    task = asyncio.create_task(write())
    await asyncio.sleep(0.2)
    await asyncio.to_thread(migrate.upgrade, scratch_url)
    await asyncio.sleep(0.2)
    writing = False
    await task
    assert len(waits) > 20 and max(waits) < 1.0, (len(waits), max(waits))

    connection = await asyncpg.connect(scratch_url)
    try:
        assert await connection.fetchval(
            "SELECT relkind::text FROM pg_class WHERE oid = 'turns'::regclass") == "p"
        assert await connection.fetchval(
            "SELECT pg_relation_filenode('turns_p_history')") == file_before
        assert await connection.fetchval(
            "SELECT count(*) FROM turns WHERE session_id LIKE 'old-%'") == 20000
        assert await connection.fetchval(
            "SELECT count(*) FROM turns WHERE session_id LIKE 'during-%'") == len(waits)
    finally:
        await connection.close()
    store = await Store.connect(scratch_url, pool_size=2)
    try:
        from dataclasses import replace

        from tests.store.builders import save_request

        loaded = await store.load("old-7", history_limit=5)
        assert loaded.version == 20 and [e["text"] for e in loaded.history][-1] == "oi 19006"
        later = partitions.month_start(datetime.now(UTC), 2) + timedelta(days=3)
        request = save_request("old-7", 20)
        await store.save_turn(replace(request, turn=replace(request.turn, created_at=later)))
        turns = await store.logged_turns(["old-7"])
        assert [t.version for t in turns] == list(range(1, 22))
    finally:
        await store.close()
    connection = await asyncpg.connect(scratch_url)
    try:
        row = await connection.fetchrow(
            "SELECT id, tableoid::regclass::text AS p FROM turns"
            " WHERE session_id = 'old-7' AND version = 21")
    finally:
        await connection.close()
    assert row["id"] > last_id + len(waits)
    assert row["p"] == partitions.partition_name(partitions.month_start(later))
