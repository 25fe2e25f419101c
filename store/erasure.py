"""Erasing one customer's conversation from every table that keeps it, in one transaction.

A customer asks to be forgotten; what the service keeps about them is spread over the session
row (its data), the turn log (every input and reply, the model's recordings, and the search
index built on them), the outbox, timers, the sources of burst turns, dead-lettered inputs
(with what they said) and dead letters kept whole. `erase` deletes all of it for the chosen
session ids in one transaction, so a reader sees the conversation whole or not at all.

Two things stay, on purpose:

- the credit ledger's rows: the amounts are the workspace's bill. Their personal text (the
  session id, and the charge key made of the input's id or source record) is replaced by a
  pseudonym per erased session (``erased:<random>``) and ``erased:<row id>``, so the sums per
  workspace, agent and day are unchanged and nothing links a row back to the customer;
- a tombstone per erased id in ``erased_sessions``: the SHA-256 of the id and the time, so the
  inspector and replays can say "erased" instead of "no such conversation". A digest of a short
  id (a phone number) can be confirmed by whoever already holds the id, which tells them only
  that it was erased.

Rows deleted here leave dead tuples until autovacuum removes them (and the trigram index
entries pointing at them); the WAL and backups keep them for their own retention.

Which ids: ``--session ID`` is exactly that id. ``--customer KEY`` is the id a channel uses
for the customer (a phone number, an e-mail address) and every conversation the channel opened
for them as ``KEY:<anything>`` (e.g. ``+5511999990000:2026-12`` for one thread per month), plus
the records refused before they named a session whose record key was one of those ids. Finding
the ``KEY:`` conversations reads the sessions and dead-lettered tables through (an id prefix
cannot use the index under every collation); an erase is rare, and its lock is taken only after.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

__all__ = [
    "MAX_KEY_CHARS",
    "Erasure",
    "digest",
    "erase",
    "erased_among",
    "erased_at",
    "refusal",
]

MAX_KEY_CHARS = 1_000
"""The longest id or customer key taken (session ids are at most 256 characters)."""

TABLES = (
    "sessions", "turns", "turn_recordings", "turn_sources", "outbox", "timers",
    "dead_lettered_sources", "dead_letters",
)
"""The tables rows are deleted from, in the order ``Erasure.removed`` reports them."""


def refusal(value: str) -> str | None:
    """Why ``value`` cannot name a stored session (None when it can): empty (``""`` is where
    records refused before naming a session are kept, so it names everyone's), a NUL, text
    that is not UTF-8, or longer than any id kept."""
    if value == "":
        return "an empty id names no conversation"
    if len(value) > MAX_KEY_CHARS:
        return f"longer than {MAX_KEY_CHARS} characters; no stored id is"
    if "\x00" in value:
        return "holds a NUL character; no stored id does"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "not valid UTF-8 (a lone surrogate); no stored id is"
    return None


def digest(session_id: str) -> bytes:
    """What the tombstone keeps of an erased id."""
    return hashlib.sha256(session_id.encode("utf-8")).digest()


@dataclass
class Erasure:
    """What one erase removed: per table, rows deleted; the ledger rows made anonymous; the
    ids that had anything stored (each now has a tombstone)."""

    removed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TABLES, 0))
    ledger_anonymised: int = 0
    erased_ids: list[str] = field(default_factory=list)

    @property
    def anything(self) -> bool:
        return bool(self.erased_ids)


_CUSTOMER_IDS = text("""
    SELECT id FROM sessions WHERE id = :key OR starts_with(id, :prefix)
    UNION
    SELECT session_id FROM dead_lettered_sources
    WHERE session_id = :key OR starts_with(session_id, :prefix)
""")

_LOCK_SESSIONS = text("""
    SELECT id FROM sessions WHERE id = ANY(CAST(:ids AS text[])) ORDER BY id FOR UPDATE
""")

_SOURCE = "source_topic || ':' || source_partition || ':' || source_offset"

_DELETES: dict[str, Any] = {
    "turn_sources": text(
        "DELETE FROM turn_sources WHERE session_id = ANY(CAST(:ids AS text[]))"
        f" RETURNING session_id, {_SOURCE} AS source"
    ),
    "turn_recordings": text(
        "DELETE FROM turn_recordings WHERE session_id = ANY(CAST(:ids AS text[]))"
        " RETURNING session_id, NULL"
    ),
    "turns": text(
        "DELETE FROM turns WHERE session_id = ANY(CAST(:ids AS text[]))"
        f" RETURNING session_id, {_SOURCE} AS source"
    ),
    # A record refused before it named a session is kept under session id '' with its key.
    "dead_lettered_sources": text(
        "DELETE FROM dead_lettered_sources WHERE session_id = ANY(CAST(:ids AS text[]))"
        " OR (session_id = '' AND record_key = ANY(CAST(:ids AS text[])))"
        f" RETURNING CASE WHEN session_id = '' THEN record_key ELSE session_id END, {_SOURCE}"
    ),
    "outbox": text(
        "DELETE FROM outbox WHERE session_id = ANY(CAST(:ids AS text[]))"
        " RETURNING session_id, NULL"
    ),
    "timers": text(
        "DELETE FROM timers WHERE session_id = ANY(CAST(:ids AS text[]))"
        " RETURNING session_id, NULL"
    ),
    "sessions": text(
        "DELETE FROM sessions WHERE id = ANY(CAST(:ids AS text[])) RETURNING id, NULL"
    ),
}

# Kept whole: an inbound record too large for the DLQ topic (keyed by its session id, named by
# its source), an outbox row or a timer's wake the broker refused (keyed by the session id).
_DELETE_KEPT = text("""
    DELETE FROM dead_letters
    WHERE key = ANY(CAST(:keys AS bytea[])) OR source = ANY(CAST(:sources AS text[]))
    RETURNING key
""")

_ANONYMISE_LEDGER = text("""
    UPDATE credit_ledger AS c
    SET session_id = p.pseudonym, charge_key = 'erased:' || c.id
    FROM unnest(CAST(:ids AS text[]), CAST(:pseudonyms AS text[])) AS p(id, pseudonym)
    WHERE c.session_id = p.id
    RETURNING p.id
""")

_TOMBSTONE = text("""
    INSERT INTO erased_sessions (digest)
    SELECT unnest(CAST(:digests AS bytea[]))
    ON CONFLICT (digest) DO UPDATE SET erased_at = now()
""")

# Erased and not begun again since: an input for an erased id starts a new conversation, which
# is then what the id names.
_ERASED_AT = text("""
    SELECT a.digest, e.erased_at
    FROM unnest(CAST(:ids AS text[]), CAST(:digests AS bytea[])) AS a(id, digest)
    JOIN erased_sessions AS e ON e.digest = a.digest
    WHERE NOT EXISTS (SELECT 1 FROM sessions AS s WHERE s.id = a.id)
""")


async def erase(
    engine: AsyncEngine, *, session_id: str | None = None, customer: str | None = None
) -> Erasure:
    """Erase the conversation ``session_id``, or every conversation of ``customer`` (see the
    module's docstring); one transaction. Raises ValueError (with the reason) for a value
    ``refusal`` refuses."""
    if (session_id is None) == (customer is None):
        raise ValueError("erase takes a session id or a customer key, one of them")
    value = session_id if session_id is not None else customer
    assert value is not None
    if (reason := refusal(value)) is not None:
        raise ValueError(reason)
    async with engine.connect() as plain:
        connection = await plain.execution_options(isolation_level="READ COMMITTED")
        async with connection.begin():
            if customer is not None:
                found = await connection.execute(
                    _CUSTOMER_IDS, {"key": customer, "prefix": customer + ":"}
                )
                ids = sorted({customer, *(str(r[0]) for r in found)})
            else:
                ids = [value]
            return await _erase_ids(connection, ids)


async def _erase_ids(connection: AsyncConnection, ids: list[str]) -> Erasure:
    """Delete what ``ids`` keep, inside the caller's transaction. The session rows are locked
    first: a turn of one of them being saved now either commits before (and is erased) or
    waits and then finds no session (and saves as a new conversation)."""
    await connection.execute(_LOCK_SESSIONS, {"ids": ids})
    out = Erasure()
    had: set[str] = set()
    sources: set[str] = set()
    for table, statement in _DELETES.items():
        rows = (await connection.execute(statement, {"ids": ids})).all()
        out.removed[table] = len(rows)
        for owner, source in rows:
            had.add(str(owner))
            if source is not None:
                sources.add(str(source))
    kept = await connection.execute(_DELETE_KEPT, {
        "keys": [i.encode("utf-8") for i in ids], "sources": sorted(sources),
    })
    kept_keys = [None if r[0] is None else bytes(r[0]) for r in kept.all()]
    out.removed["dead_letters"] = len(kept_keys)
    by_key = {i.encode("utf-8"): i for i in ids}
    had.update(by_key[k] for k in kept_keys if k in by_key)
    pseudonyms = [f"erased:{uuid.uuid4().hex}" for _ in ids]
    anonymised = (await connection.execute(
        _ANONYMISE_LEDGER, {"ids": ids, "pseudonyms": pseudonyms}
    )).all()
    out.ledger_anonymised = len(anonymised)
    had.update(str(r[0]) for r in anonymised)
    out.erased_ids = sorted(had & set(ids))
    if out.erased_ids:
        await connection.execute(_TOMBSTONE, {"digests": [digest(i) for i in out.erased_ids]})
    return out


async def erased_among(engine: AsyncEngine, session_ids: list[str]) -> dict[str, datetime]:
    """Which of ``session_ids`` were erased, and when, among those no conversation has begun
    under since (ids ``refusal`` refuses never were)."""
    asked = {digest(i): i for i in session_ids if refusal(i) is None}
    if not asked:
        return {}
    async with engine.connect() as connection:
        rows = (await connection.execute(
            _ERASED_AT, {"ids": list(asked.values()), "digests": list(asked)}
        )).all()
    return {asked[bytes(r[0])]: r[1] for r in rows}


async def erased_at(engine: AsyncEngine, session_id: str) -> datetime | None:
    """When ``session_id`` was erased, or None when it was not."""
    return (await erased_among(engine, [session_id])).get(session_id)
