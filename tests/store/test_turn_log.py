"""Reading the turn log back for replays, and pruning expired model recordings."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from store import Store
from tests.store.builders import save_request

RECORDING = {"v": 1, "level": "envelopes", "calls": [{"kind": "speak", "ok": True,
             "reply": {"json": {"message": "oi"}}}], "fields": {"name": "Ana"}}


async def _save(store: Store, session_id: str, version: int, *, created_at: datetime,
                recording: dict[str, object] | None = RECORDING) -> None:
    request = save_request(session_id, version - 1, replies=[f"{session_id}:{version}"])
    turn = replace(request.turn, created_at=created_at, clock_at=created_at
                   - timedelta(milliseconds=5), model_calls=recording)
    await store.save_turn(replace(request, turn=turn))


async def test_logged_turns_come_back_with_clock_and_recording(store: Store) -> None:
    """A saved turn's clock time and recording are read back as written, per session in
    version order, and sessions never mix."""
    t0 = datetime(2026, 3, 1, 9, tzinfo=UTC)
    for n in range(6):
        for version in (1, 2):
            await _save(store, f"s-{n}", version, created_at=t0 + timedelta(minutes=version))
    turns = await store.logged_turns(["s-1", "s-4"])
    assert [(t.session_id, t.version) for t in turns] == [
        ("s-1", 1), ("s-1", 2), ("s-4", 1), ("s-4", 2)]
    first = turns[0]
    assert first.clock_at == t0 + timedelta(minutes=1) - timedelta(milliseconds=5)
    assert first.model_calls == RECORDING
    assert [m["text"] for m in turns[3].messages] == ["s-4:2"]


async def test_session_ids_are_chosen_by_the_time_of_their_turns(store: Store) -> None:
    """A session is in a window when any of its turns is; the bounds are [since, until)."""
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    await _save(store, "early", 1, created_at=t0)
    await _save(store, "both", 1, created_at=t0)
    await _save(store, "both", 2, created_at=t0 + timedelta(days=1))
    await _save(store, "late", 1, created_at=t0 + timedelta(days=2))
    day2 = t0 + timedelta(days=1)
    assert await store.logged_session_ids(since=day2, until=day2 + timedelta(days=1)) == ["both"]
    assert await store.logged_session_ids(until=day2) == ["both", "early"]
    assert await store.logged_session_ids() == ["both", "early", "late"]


async def test_prune_drops_only_recordings_older_than_the_retention(
    store: Store, database_url: str
) -> None:
    """Expired recordings are dropped; newer ones and the rest of every row stay."""
    now = datetime.now(UTC)
    await _save(store, "old", 1, created_at=now - timedelta(days=40))
    await _save(store, "new", 1, created_at=now - timedelta(days=1))
    await _save(store, "none", 1, created_at=now - timedelta(days=50), recording=None)
    assert await store.prune_recordings(older_than=timedelta(days=30), batch=1) == 1
    turns = {t.session_id: t for t in await store.logged_turns(["old", "new", "none"])}
    assert turns["old"].model_calls is None and turns["old"].messages
    assert turns["new"].model_calls == RECORDING
    connection = await asyncpg.connect(database_url)
    try:
        left = await connection.fetchval("SELECT count(*) FROM turn_recordings")
        in_rows = await connection.fetchval(
            "SELECT count(*) FROM turns WHERE model_calls IS NOT NULL")
    finally:
        await connection.close()
    assert left == 1 and in_rows == 0


async def test_pruning_a_recording_leaves_its_turn_row_as_it_was(
    store: Store, database_url: str
) -> None:
    """The recording is deleted from its own table: the turn's row keeps its row version (its
    xmin and place on disk), so pruning writes no new copy of the turn."""
    now = datetime.now(UTC)
    for n in range(5):
        await _save(store, f"s{n}", 1, created_at=now - timedelta(days=40))
    connection = await asyncpg.connect(database_url)
    try:
        rows = "SELECT session_id, xmin::text, ctid::text FROM turns ORDER BY session_id"
        before = await connection.fetch(rows)
        assert await store.prune_recordings(older_than=timedelta(days=30)) == 5
        assert await connection.fetch(rows) == before
        assert await connection.fetchval("SELECT count(*) FROM turn_recordings") == 0
    finally:
        await connection.close()


async def test_a_turn_saved_before_the_recordings_table_is_read_and_pruned_from_its_row(
    store: Store, database_url: str
) -> None:
    """A turn saved before migration 0022 holds its recording in ``turns.model_calls``: replays
    and the inspector read it from there, and pruning clears it there."""
    from consumer.inspect.reading import Reader

    now = datetime.now(UTC)
    await _save(store, "legacy", 1, created_at=now - timedelta(days=40), recording=None)
    await _save(store, "legacy", 2, created_at=now - timedelta(days=1), recording=None)
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute("UPDATE turns SET model_calls = $1::jsonb",
                                 json.dumps(RECORDING))
    finally:
        await connection.close()
    assert [t.model_calls for t in await store.logged_turns(["legacy"])] == [RECORDING] * 2
    reader = Reader(database_url, pool_size=1)
    try:
        rows = await reader.conversation("legacy")
        assert rows is not None
        assert [t["model_calls"] for t in rows.turns] == [RECORDING] * 2
        assert await store.prune_recordings(older_than=timedelta(days=30)) == 1
        rows = await reader.conversation("legacy")
        assert rows is not None
        assert [t["model_calls"] for t in rows.turns] == [None, RECORDING]
    finally:
        await reader.close()


async def test_the_prune_command_drops_expired_recordings(
    store: Store, database_url: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``turnflow prune --older-than-days N`` drops recordings older than N days and says how
    many; with retention 0 and no option it keeps everything."""
    import asyncio

    from consumer.cli import main

    now = datetime.now(UTC)
    await _save(store, "old", 1, created_at=now - timedelta(days=10))
    await _save(store, "new", 1, created_at=now - timedelta(hours=1))
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("MODEL_RECORDING_RETENTION_DAYS", "0")
    assert await asyncio.to_thread(main, ["prune"]) == 0
    assert "nothing pruned" in capsys.readouterr().out
    assert await asyncio.to_thread(main, ["prune", "--older-than-days", "7"]) == 0
    assert "of 1 turns" in capsys.readouterr().out
    turns = {t.session_id: t.model_calls for t in await store.logged_turns(["old", "new"])}
    assert turns == {"old": None, "new": RECORDING}


async def test_the_prune_command_deletes_outbox_rows_published_before_the_retention(
    store: Store, database_url: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``turnflow prune`` also deletes outbox rows published longer ago than
    ``OUTBOX_RETENTION_DAYS`` (or ``--outbox-older-than-days``); 0 keeps them; rows not yet
    published stay whatever their age."""
    import asyncio

    from consumer.cli import main

    ids = (await store.save_turn(save_request("out", 0, outbox=3))).outbox_ids
    await store.mark_published(ids[:2])
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute(
            "UPDATE outbox SET published_at = now() - interval '10 days' WHERE id = $1", ids[0]
        )
        monkeypatch.setenv("DATABASE_URL", database_url)
        monkeypatch.setenv("MODEL_RECORDING_RETENTION_DAYS", "0")
        monkeypatch.setenv("OUTBOX_RETENTION_DAYS", "0")
        assert await asyncio.to_thread(main, ["prune"]) == 0
        assert "no outbox row deleted" in capsys.readouterr().out
        monkeypatch.setenv("OUTBOX_RETENTION_DAYS", "7")
        assert await asyncio.to_thread(main, ["prune"]) == 0
        assert "deleted 1 outbox rows published more than 7 days ago" in capsys.readouterr().out
        assert await asyncio.to_thread(main, ["prune", "--outbox-older-than-days", "0"]) == 0
        assert "deleted 1 outbox rows" in capsys.readouterr().out
        left = [r["id"] for r in await connection.fetch("SELECT id FROM outbox ORDER BY id")]
    finally:
        await connection.close()
    assert left == ids[2:]

