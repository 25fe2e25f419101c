"""Fetching unpublished outbox rows for a publisher, and marking them published.

A fetch locks rows `FOR UPDATE SKIP LOCKED` inside a transaction the publisher holds open until
it has published and marked them, so two publishers never hold the same row. Row locks alone
would let a publisher send a session's newer row while another still holds an older one, so the
fetch also drops every row that has an older unpublished row of its session outside the batch:
what a publisher gets is, per session, a prefix of that session's unpublished rows. The dropped
rows go out on a later fetch, after their elders.

The relay's fetch (`older_than`) takes only rows older than its grace period, judged in SQL by
the database clock that stamped `created_at`: it never locks a young row, which is the writing
consumer's to send and mark (a lock held across the relay's sends would stall that mark, and
every turn sharing it). A young row is not locked, so it also counts as an older row outside
the batch: a session's rows after its first young one are dropped, and the prefix holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from store import jsoncodec
from store.direct import positional
from store.records import OutboxRow

_FETCH = """
WITH locked AS (
    SELECT id, session_id, topic, key, payload, created_at, traceparent, tracestate
    FROM outbox
    WHERE published_at IS NULL {row_filter}
    ORDER BY id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
SELECT l.id, l.session_id, l.topic, l.key, l.payload, l.created_at, l.traceparent,
       l.tracestate
FROM locked AS l
WHERE NOT EXISTS (
    SELECT 1 FROM outbox AS o
    WHERE o.session_id = l.session_id
      AND o.published_at IS NULL
      AND o.id < l.id
      AND o.id NOT IN (SELECT id FROM locked)
)
ORDER BY l.id
"""

# Separate statements rather than one with optional filters, so each keeps its own index plan:
# a session's flush must not scan the whole backlog once the server switches to a generic plan.
FETCH_UNPUBLISHED = text(_FETCH.format(row_filter=""))
FETCH_SESSION_UNPUBLISHED = text(_FETCH.format(row_filter="AND session_id = :session_id"))
FETCH_OLD_UNPUBLISHED = text(_FETCH.format(
    row_filter="AND created_at <= now() - make_interval(secs => :older_than_s)"
))

MARK_PUBLISHED = text("""
UPDATE outbox SET published_at = now()
WHERE id = ANY(CAST(:ids AS bigint[])) AND published_at IS NULL
""")

MARK_PUBLISHED_DIRECT = positional(MARK_PUBLISHED)  # the same statement, store's direct path

BACKLOG = text("SELECT count(*) FROM outbox WHERE published_at IS NULL")

# In batches through `ix_outbox_published`, like pruning recordings: the first prune after a
# long time without one must not delete millions of rows in one statement.
DELETE_PUBLISHED = text("""
DELETE FROM outbox
WHERE id IN (
    SELECT id FROM outbox
    WHERE published_at IS NOT NULL
      AND published_at < now() - make_interval(secs => :older_than_s)
    LIMIT :limit
)
""")


def outbox_rows(rows: Sequence[Any]) -> list[OutboxRow]:
    """Decode fetched rows."""
    return [
        OutboxRow(
            id=row.id,
            session_id=row.session_id,
            topic=row.topic,
            key=row.key,
            payload=jsoncodec.loads(row.payload),
            created_at=row.created_at,
            traceparent=row.traceparent,
            tracestate=row.tracestate,
        )
        for row in rows
    ]


class OutboxBatch:
    """Rows locked for one publisher; valid inside `async with store.fetch_unpublished(...)`."""

    def __init__(self, connection: AsyncConnection, rows: list[OutboxRow]) -> None:
        self._connection = connection
        self.rows = rows

    async def mark_published(self, ids: Sequence[int] | None = None) -> int:
        """Mark `ids` (default: every row of the batch) published; commits with the batch."""
        chosen = [row.id for row in self.rows] if ids is None else list(ids)
        if not chosen:
            return 0
        result = await self._connection.execute(MARK_PUBLISHED, {"ids": chosen})
        return int(result.rowcount)
