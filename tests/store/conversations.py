"""Conversations with something in every table a conversation reaches, for the erase and
retention tests: turns with recordings and burst sources, credits, outbox rows, timers,
dead-lettered inputs (one refused before naming its session) and a dead letter kept whole."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from store import (
    ConsumedInput,
    DeadLetterRecord,
    DeadLetterWords,
    SourceRecord,
    Store,
    TimerEntry,
)
from store.schema import TABLE_NAMES
from tests.store.builders import save_request

RECORDING = {"v": 1, "level": "envelopes", "calls": [{"kind": "speak", "ok": True}],
             "fields": {"name": "Ana"}}

_offsets = itertools.count(1)


async def fill(store: Store, session_id: str, *, turns: int = 3,
               created_at: datetime | None = None) -> None:
    """``turns`` turns of ``session_id`` and one of everything else it can own."""
    at = created_at or datetime.now(UTC)
    for version in range(1, turns + 1):
        request = save_request(
            session_id, version - 1, replies=[f"{session_id} reply {version}"],
            source=SourceRecord("inbound.turns", 0, next(_offsets)),
            input_id=f"{session_id}-in-{version}",
            state={"id": session_id, "data": {"phone": session_id, "v": version}},
        )
        turn = replace(
            request.turn, model_calls=RECORDING, created_at=at + timedelta(seconds=version),
            earlier=(ConsumedInput(SourceRecord("inbound.turns", 1, next(_offsets)),
                                   f"{session_id}-early-{version}"),),
            workspace="w1", agent_id="agent", agent_version=1, credits=2,
        )
        await store.save_turn(replace(request, turn=turn))
    await store.upsert_timers([TimerEntry(key="nudge", session_id=session_id,
                                          at=at + timedelta(hours=1))])
    dead = SourceRecord("inbound.turns", 2, next(_offsets))
    await store.record_dead_lettered(
        session_id, [dead], "bad-input",
        words=DeadLetterWords(message=f"hello from {session_id}", key=session_id),
    )
    await store.record_dead_lettered(
        "", [SourceRecord("inbound.turns", 2, next(_offsets))], "missing-session-id",
        words=DeadLetterWords(message="no session named", key=session_id),
    )
    await store.keep_dead_letter(DeadLetterRecord(
        source=f"{dead.topic}:{dead.partition}:{dead.offset}", topic="inbound.turns.dlq",
        reason="too-large", detail="", key=session_id.encode(), value=b"x" * 10,
    ))


async def table_rows(url: str) -> dict[str, list[str]]:
    """Every row of every table as JSON text, sorted, per table."""
    connection = await asyncpg.connect(url)
    try:
        out: dict[str, list[str]] = {}
        for table in TABLE_NAMES:
            rows = await connection.fetch(f"SELECT row_to_json(t)::text AS j FROM {table} AS t")
            out[table] = sorted(r["j"] for r in rows)
        return out
    finally:
        await connection.close()


async def scalar(url: str, sql: str, *args: Any) -> Any:
    connection = await asyncpg.connect(url)
    try:
        return await connection.fetchval(sql, *args)
    finally:
        await connection.close()
