"""Timers: setting them (with `replaces`), deleting them, and claiming the due ones.

`upsert_timers` applies a batch in order — an entry's `replaces` deletes that key, then the
entry is set — by folding the batch into one set of deletions and one set of upserts, written
in one statement (one transaction). Claiming compares with the database clock (`now()`), never
the caller's, and locks the claimed rows `FOR UPDATE SKIP LOCKED` in a transaction the caller
holds open until it has produced the wakes and deleted the rows: a second claimer skips them,
and a claimer that dies releases them for the next one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from store import jsoncodec
from store.records import Timer

UPSERT = text("""
WITH gone AS (
    DELETE FROM timers WHERE key = ANY(CAST(:deleted AS text[]))
)
INSERT INTO timers (key, session_id, at)
SELECT e.key, e.session_id, e.at
FROM jsonb_to_recordset(CAST(:entries AS jsonb)) AS e(key text, session_id text, at timestamptz)
ON CONFLICT (key) DO UPDATE SET session_id = EXCLUDED.session_id, at = EXCLUDED.at
""")

DELETE = text("DELETE FROM timers WHERE key = ANY(CAST(:keys AS text[]))")

CLAIM_DUE = text("""
WITH due AS (
    SELECT key, session_id, at FROM timers
    WHERE at <= now()
    ORDER BY at, key
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
SELECT now() AS db_now, due.key, due.session_id, due.at
FROM (SELECT 1) AS one LEFT JOIN due ON true
ORDER BY due.at, due.key
""")

NEXT_DUE_IN = text("SELECT EXTRACT(EPOCH FROM (min(at) - clock_timestamp())) FROM timers")

PENDING = text("SELECT count(*) FROM timers")


def fold(entries: Iterable[TimerLike]) -> tuple[list[str], list[TimerLike]]:
    """Reduce an ordered batch to (keys to delete, entries to upsert), disjoint by key."""
    upserts: dict[str, TimerLike] = {}
    deleted: set[str] = set()
    for entry in entries:
        if entry.at.tzinfo is None:
            raise ValueError(f"timer {entry.key!r}: `at` must be timezone-aware")
        if entry.replaces is not None and entry.replaces != entry.key:
            upserts.pop(entry.replaces, None)
            deleted.add(entry.replaces)
        upserts[entry.key] = entry
        deleted.discard(entry.key)
    return sorted(deleted), list(upserts.values())


def upsert_parameters(deleted: list[str], upserts: list[TimerLike]) -> dict[str, Any]:
    """Bind parameters for `UPSERT`."""
    return {
        "deleted": deleted,
        "entries": jsoncodec.dumps(
            [{"key": e.key, "session_id": e.session_id, "at": e.at} for e in upserts]
        ),
    }


class TimerLike(Protocol):
    """What `upsert_timers` reads of an entry (`TimerEntry` or any look-alike)."""

    @property
    def key(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def at(self) -> datetime: ...
    @property
    def replaces(self) -> str | None: ...


def claimed(rows: Sequence[Any]) -> tuple[datetime, list[Timer]]:
    """Decode `CLAIM_DUE` rows: the database's `now()` and the claimed timers."""
    db_now: datetime = rows[0].db_now
    return db_now, [
        Timer(key=r.key, session_id=r.session_id, at=r.at) for r in rows if r.key is not None
    ]


class ClaimedTimers:
    """Due timers locked for one claimer; valid inside `async with store.claim_due(...)`.

    `db_now` is the database clock the claim compared with (for fire-delay metrics).
    """

    def __init__(self, connection: AsyncConnection, db_now: datetime, timers: list[Timer]) -> None:
        self._connection = connection
        self.db_now = db_now
        self.timers = timers

    async def delete(self, keys: Sequence[str] | None = None) -> int:
        """Delete fired timers (default: the whole batch); commits with the batch."""
        chosen = [t.key for t in self.timers] if keys is None else list(keys)
        if not chosen:
            return 0
        result = await self._connection.execute(DELETE, {"keys": chosen})
        return int(result.rowcount)
