"""Timers: setting them (with `replaces`), deleting them, and claiming the due ones.

A timer is identified by the pair (session id, key), never by the key alone: the key is the
engine's, and a row belongs to the conversation that scheduled it. An entry's `replaces` deletes
a key of its own session only, and a claimed row wakes only its own session, so even two
conversations that minted the same key could neither steal nor cancel each other's timer.

`upsert_timers` applies a batch in order — an entry's `replaces` deletes that key, then the
entry is set — by folding the batch into one set of deletions and one set of upserts, written
in one statement (one transaction). Claiming compares with the database clock (`now()`), never
the caller's, and locks the claimed rows `FOR UPDATE SKIP LOCKED` in a transaction the caller
holds open until it has produced the wakes and deleted the rows whose wakes were acknowledged
(`ClaimedTimers.delete(ids)`; a row whose wake failed stays): a second claimer skips them, and a
claimer that dies releases them for the next one.

The pairs to delete go to PostgreSQL as two arrays, not as a JSON list: it guesses a JSON list
holds 100 pairs, and for 100 pairs hashing the whole timers table looked cheaper than 100
primary-key probes (a 10,000-timer table was read whole on every deletion of one timer). An
array's length is known to it, so each pair is one probe. The timers to set stay a JSON list:
an insert reads no other row, and from arrays it measured slower (bench/README.md, "Load").
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
    DELETE FROM timers t
    USING unnest(CAST(:deleted_session_ids AS text[]), CAST(:deleted_keys AS text[]))
        AS d(session_id, key)
    WHERE t.session_id = d.session_id AND t.key = d.key
)
INSERT INTO timers (session_id, key, at, traceparent, tracestate)
SELECT e.session_id, e.key, e.at, e.traceparent, e.tracestate
FROM jsonb_to_recordset(CAST(:entries AS jsonb))
    AS e(key text, session_id text, at timestamptz, traceparent text, tracestate text)
ON CONFLICT (session_id, key) DO UPDATE
    SET at = EXCLUDED.at, traceparent = EXCLUDED.traceparent, tracestate = EXCLUDED.tracestate
""")

DELETE = text("""
DELETE FROM timers t
USING unnest(CAST(:session_ids AS text[]), CAST(:keys AS text[])) AS d(session_id, key)
WHERE t.session_id = d.session_id AND t.key = d.key
""")

CLAIM_DUE = text("""
WITH due AS (
    SELECT key, session_id, at, traceparent, tracestate FROM timers
    WHERE at <= now()
    ORDER BY at, session_id, key
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
SELECT now() AS db_now, due.key, due.session_id, due.at, due.traceparent, due.tracestate
FROM (SELECT 1) AS one LEFT JOIN due ON true
ORDER BY due.at, due.session_id, due.key
""")

NEXT_DUE_IN = text("SELECT EXTRACT(EPOCH FROM (min(at) - clock_timestamp())) FROM timers")

PENDING = text("SELECT count(*) FROM timers")


TimerId = tuple[str, str]
"""(session id, key): what identifies a timer."""


def fold(entries: Iterable[TimerLike]) -> tuple[list[TimerId], list[TimerLike]]:
    """Reduce an ordered batch to (timers to delete, entries to upsert), disjoint by
    (session id, key); a `replaces` acts within its own entry's session."""
    upserts: dict[TimerId, TimerLike] = {}
    deleted: set[TimerId] = set()
    for entry in entries:
        if entry.at.tzinfo is None:
            raise ValueError("timer `at` must be timezone-aware")
        if entry.replaces is not None and entry.replaces != entry.key:
            replaced = (entry.session_id, entry.replaces)
            upserts.pop(replaced, None)
            deleted.add(replaced)
        own = (entry.session_id, entry.key)
        upserts[own] = entry
        deleted.discard(own)
    return sorted(deleted), list(upserts.values())


def _text(value: str) -> str:
    """A session id or key as the timers table holds it: U+0000 as U+FFFD, as in the JSON
    columns (PostgreSQL text cannot hold NUL)."""
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


def _context_text(value: str | None) -> str | None:
    """A stored trace-context header: text PostgreSQL can hold, else None (the callers store
    only well-formed contexts; this keeps a look-alike entry from failing the batch)."""
    if not isinstance(value, str) or "\x00" in value:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return value


def pairs_parameters(ids: Iterable[TimerId]) -> dict[str, list[str]]:
    """(session id, key) pairs as the two arrays `DELETE` reads."""
    pairs = list(ids)
    return {"session_ids": [_text(s) for s, _ in pairs], "keys": [_text(k) for _, k in pairs]}


def upsert_parameters(deleted: list[TimerId], upserts: list[TimerLike]) -> dict[str, Any]:
    """Bind parameters for `UPSERT`."""
    gone = pairs_parameters(deleted)
    return {
        "deleted_session_ids": gone["session_ids"],
        "deleted_keys": gone["keys"],
        "entries": jsoncodec.dumps(
            [
                {"key": e.key, "session_id": e.session_id, "at": e.at,
                 "traceparent": _context_text(getattr(e, "traceparent", None)),
                 "tracestate": _context_text(getattr(e, "tracestate", None))}
                for e in upserts
            ]
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
        Timer(key=r.key, session_id=r.session_id, at=r.at, traceparent=r.traceparent,
              tracestate=r.tracestate)
        for r in rows
        if r.key is not None
    ]


class ClaimedTimers:
    """Due timers locked for one claimer; valid inside `async with store.claim_due(...)`.

    `db_now` is the database clock the claim compared with (for fire-delay metrics).
    """

    def __init__(self, connection: AsyncConnection, db_now: datetime, timers: list[Timer]) -> None:
        self._connection = connection
        self.db_now = db_now
        self.timers = timers

    async def delete(self, ids: Sequence[TimerId] | None = None) -> int:
        """Delete fired timers, by (session id, key) (default: the whole batch); commits with
        the batch."""
        chosen = [(t.session_id, t.key) for t in self.timers] if ids is None else list(ids)
        if not chosen:
            return 0
        result = await self._connection.execute(DELETE, pairs_parameters(chosen))
        return int(result.rowcount)
