"""Reading the turn log back for replays, and pruning expired model recordings."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import asyncpg

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
        left = await connection.fetchval("SELECT count(*) FROM turns WHERE model_calls IS NOT NULL")
    finally:
        await connection.close()
    assert left == 1
