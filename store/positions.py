"""Source positions, and the database's timeline they are valid on.

A consumer's progress through an inbound partition is its Kafka committed offset, but after a
failover with asynchronous replication the promoted standby may lack the last commits of the
old primary while Kafka still holds the offsets committed for them: those inputs would never
be read again, though their customers got the replies. So the database keeps its own position
per (consumer group, topic, partition): the next offset to read, everything below it done
(saved, skipped or dead-lettered). It is written *after* the work it covers was committed, by
a statement of its own: a standby replays the primary's WAL in order, so any server that has
a position has every commit made before it. On assignment the consumer starts there: at worst
a little behind Kafka (re-read inputs are found in the turn log and skipped), and after a lossy
failover exactly at the first input the promoted database does not have. A Kafka group whose
committed offsets are missing (a coordinator that lost or is still loading them) starts there
too, not at the start of the topic.

That holds only while the consumer's memory of what is done matches the database it writes
to. A promotion switches the database to a new timeline; a consumer that kept running would
count as done inputs whose saves the promotion lost, and write positions past them.
``TimelineGuard`` therefore binds a store to the timeline its first connection found (the
primary's WAL timeline, which changes exactly on a promotion, not on a restart) and refuses
any later connection to another one with ``DatabaseChanged``: nothing a process learned from
the old primary reaches the new one, and the consumer restarts, reading its positions afresh.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from store.errors import StoreError

__all__ = [
    "DatabaseChanged",
    "PositionsMoved",
    "PositionsUpdate",
    "TimelineGuard",
    "check_and_write",
    "read_positions",
    "write_positions",
]

Partition = tuple[str, int]
PositionsUpdate = tuple[str, Mapping[Partition, int | None], Mapping[Partition, int]]
"""(consumer group, where each partition is expected to be, where it moves to)."""

# The timeline of the primary's current WAL (the first 8 hex digits of its file name); NULL on
# a standby, which has no timeline of its own to write on yet.
TIMELINE = (
    "SELECT CASE WHEN pg_is_in_recovery() THEN NULL "
    "ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END"
)

_READ = text("""
    SELECT topic, partition, next_offset FROM source_positions
    WHERE consumer_group = :group
      AND (topic, partition) IN (
          SELECT * FROM unnest(CAST(:topics AS text[]), CAST(:partitions AS integer[])))
""")

# Monotonic: a position only moves forward, so a late write (a revoked owner's last one) never
# takes it back.
_WRITE = text("""
    INSERT INTO source_positions (consumer_group, topic, partition, next_offset)
    SELECT :group, p.topic, p.partition, p.next_offset
    FROM unnest(CAST(:topics AS text[]), CAST(:partitions AS integer[]),
                CAST(:offsets AS bigint[])) AS p(topic, partition, next_offset)
    ORDER BY p.topic, p.partition
    ON CONFLICT (consumer_group, topic, partition) DO UPDATE
    SET next_offset = EXCLUDED.next_offset, updated_at = now()
    WHERE source_positions.next_offset < EXCLUDED.next_offset
""")


_LOCK = text("""
    SELECT topic, partition, next_offset FROM source_positions
    WHERE consumer_group = :group
      AND (topic, partition) IN (
          SELECT * FROM unnest(CAST(:topics AS text[]), CAST(:partitions AS integer[])))
    ORDER BY topic, partition
    FOR UPDATE
""")


class PositionsMoved(StoreError):
    """The stored positions are not where the writer left them (a failover lost its last
    writes, or another owner moved them): nothing was written; ``stored`` has where each
    partition really is (None: no position stored)."""

    def __init__(self, stored: dict[Partition, int | None]) -> None:
        self.stored = stored
        super().__init__(f"stored positions moved: {len(stored)} partitions")


class DatabaseChanged(StoreError, ConnectionError):
    """The store reached a database on another timeline than the one it started on (a standby
    promoted after a failover): refused, so nothing remembered from the old primary is written
    to the new one. A ``ConnectionError``, so every retry loop treats it as an outage."""

    def __init__(self, *, bound: str, found: str) -> None:
        self.bound = bound
        self.found = found
        super().__init__(
            f"the database moved from timeline {bound} to {found} (a failover): "
            "restart to continue from what the database holds"
        )


class TimelineGuard:
    """Binds an engine's connections to the database timeline the first one found.

    Checked once per new connection (one extra query per connection, none per statement); a
    pooled connection keeps its server for its life, so the check covers every statement.
    Through a transaction-mode pooler (``DATABASE_POOLER=transaction``) it does not: there a
    client connection's server connections change under it, and the check covers the one it
    found at connecting only (docs/production.md, "Behind PgBouncer")."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.timeline: str | None = None
        self.changed_to: str | None = None
        event.listen(engine.sync_engine, "connect", self._on_connect)

    @property
    def changed(self) -> bool:
        """True once a connection found another timeline than the bound one."""
        return self.changed_to is not None

    def _on_connect(self, dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(TIMELINE)
            row = cursor.fetchone()
        finally:
            cursor.close()
        found = None if row is None else row[0]
        if found is None:
            return  # a standby: its writes fail on their own (read-only), and it binds nothing
        if self.timeline is None:
            self.timeline = found
        elif found != self.timeline:
            self.changed_to = found
            dbapi_connection.close()
            raise DatabaseChanged(bound=self.timeline, found=found)


def _columns(partitions: Iterable[Partition]) -> tuple[list[str], list[int]]:
    listed = list(partitions)
    return [topic for topic, _ in listed], [partition for _, partition in listed]


async def read_positions(
    engine: AsyncEngine, group: str, partitions: Sequence[Partition]
) -> dict[Partition, int]:
    """The stored next offset of each of ``partitions`` that has one, for ``group``."""
    if not partitions:
        return {}
    topics, numbers = _columns(partitions)
    async with engine.connect() as connection:
        result = await connection.execute(
            _READ, {"group": group, "topics": topics, "partitions": numbers}
        )
        return {(row.topic, row.partition): int(row.next_offset) for row in result}


async def check_and_write(
    connection: AsyncConnection,
    group: str,
    expected: Mapping[Partition, int | None],
    positions: Mapping[Partition, int],
) -> None:
    """Inside the caller's transaction: lock the partitions' rows, raise ``PositionsMoved``
    when any differs from ``expected`` (None: no row), else write ``positions``. The caller's
    other writes in the transaction then commit with their positions, or not at all."""
    topics, numbers = _columns(positions)
    result = await connection.execute(
        _LOCK, {"group": group, "topics": topics, "partitions": numbers}
    )
    found: dict[Partition, int] = {
        (row.topic, row.partition): int(row.next_offset) for row in result
    }
    moved = {p: found.get(p) for p in positions if found.get(p) != expected.get(p)}
    if moved:
        raise PositionsMoved(moved)
    await connection.execute(_WRITE, {
        "group": group, "topics": topics, "partitions": numbers,
        "offsets": [positions[p] for p in zip(topics, numbers, strict=True)],
    })


async def write_positions(
    engine: AsyncEngine, group: str, positions: Mapping[Partition, int]
) -> None:
    """Store each partition's next offset for ``group`` (only ever forward), in one statement.
    Call it only with offsets whose work below is committed in this database."""
    if not positions:
        return
    topics, numbers = _columns(positions)
    async with engine.connect() as connection:
        await connection.execute(_WRITE, {
            "group": group, "topics": topics, "partitions": numbers,
            "offsets": [positions[p] for p in zip(topics, numbers, strict=True)],
        })
