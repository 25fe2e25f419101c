"""The turn log's partitions by month or by day: made ahead of time, dropped whole past the
retention.

`turns` is partitioned by range on `created_at` (migration 0023), one partition per calendar
month (UTC), named ``turns_pYYYY_MM``, or per day, ``turns_pYYYY_MM_DD`` (`TURN_PARTITION`): a
deployment writing millions of turns a day keeps and drops them a day at a time instead of a
month's terabytes at once. ``turns_p_history`` holds the turns saved before the log was
partitioned, and ``turns_p_default`` catches a turn whose period has no partition (the safety
net: a save never fails for want of one).

`ensure_ahead` makes the partitions of this period and the next ones (two months, or fourteen
days). It runs at migration, and in every retention pass (the relay's, `turnflow prune`), so a
partition exists long before its first turn. When the unit changes, the partitions of the
other unit that have not started and hold no row are dropped and made again in the new unit;
a partition already started keeps its range, and the rest of its period that no partition
covers gets one of its own (a month's remainder after daily partitions, say), so the log has
no gap. A new partition is made as a plain table and then attached,
which locks the log only in SHARE UPDATE EXCLUSIVE mode (saves and reads go on); if the default
partition already holds rows of that month (the passes did not run for a month) the month is
left to the default partition and a warning is logged.

`drop_expired` drops, with one `DROP TABLE` each, the partitions whose whole month is older than
the retention, and deletes (in batches) the default partition's rows that old. Dropping a
partition takes an ACCESS EXCLUSIVE lock on the log for an instant: it waits at most
``LOCK_TIMEOUT`` (saves queue behind it that long at worst) and else gives up until the next
pass. After a drop it deletes the burst sources of the dropped turns (`turn_sources`, by turn
id, below the oldest turn left) and the sessions nothing is left of: no turn, no run in
progress, no timer and no unsent reply.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from sqlalchemy import TextClause, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = [
    "AHEAD", "LOCK_TIMEOUT", "UNITS", "Dropped", "Partition", "Unit", "compact_closed",
    "drop_expired", "ensure_ahead", "partitions", "period_start",
]

log = logging.getLogger("turnflow.store")

LOCK_TIMEOUT = "200ms"
"""How long a partition's attach or drop waits for the turn log's lock before it gives up
until the next pass: the longest a save can wait behind it."""

DEFAULT = "turns_p_default"

Unit = Literal["month", "day"]
UNITS: tuple[Unit, ...] = ("month", "day")

AHEAD: dict[Unit, int] = {"month": 2, "day": 14}
"""Periods made ahead of the current one: a partition exists weeks before its first turn,
and a retention pass that did not run for a while still finds the next ones made."""


@dataclass(frozen=True)
class Partition:
    """One partition of the turn log and its range (None: unbounded on that side)."""

    name: str
    start: datetime | None
    end: datetime | None
    default: bool = False


@dataclass
class Dropped:
    """What one retention pass removed from the turn log."""

    partitions: list[str]
    default_rows: int = 0
    turn_sources: int = 0
    sessions: int = 0


def month_start(at: datetime, ahead: int = 0) -> datetime:
    """The first instant (UTC) of the month ``ahead`` months after ``at``'s."""
    at = at.astimezone(UTC)
    months = at.year * 12 + at.month - 1 + ahead
    return datetime(months // 12, months % 12 + 1, 1, tzinfo=UTC)


def day_start(at: datetime, ahead: int = 0) -> datetime:
    """The first instant (UTC) of the day ``ahead`` days after ``at``'s."""
    at = at.astimezone(UTC)
    return datetime(at.year, at.month, at.day, tzinfo=UTC) + timedelta(days=ahead)


def period_start(at: datetime, unit: Unit, ahead: int = 0) -> datetime:
    """The first instant (UTC) of the month or day ``ahead`` periods after ``at``'s."""
    return month_start(at, ahead) if unit == "month" else day_start(at, ahead)


def partition_name(start: datetime, unit: Unit = "month") -> str:
    """``turns_pYYYY_MM`` for a month from its first day, ``turns_pYYYY_MM_DD`` otherwise."""
    if unit == "month" and start == month_start(start):
        return f"turns_p{start:%Y_%m}"
    return f"turns_p{start:%Y_%m_%d}"


def _is_unit(partition: Partition, unit: Unit) -> bool:
    """Whether the partition spans exactly one period of ``unit``."""
    start, end = partition.start, partition.end
    if start is None or end is None:
        return False
    return start == period_start(start, unit) and end == period_start(start, unit, 1)


def _gaps(start: datetime, end: datetime, have: list[Partition]) -> list[tuple[datetime,
                                                                                datetime]]:
    """The parts of [start, end) no partition of ``have`` covers."""
    spans = sorted((p.start or datetime.min.replace(tzinfo=UTC),
                    p.end or datetime.max.replace(tzinfo=UTC)) for p in have)
    out, at = [], start
    for lower, upper in spans:
        if upper <= at or lower >= end:
            continue
        if lower > at:
            out.append((at, lower))
        at = max(at, upper)
        if at >= end:
            break
    if at < end:
        out.append((at, end))
    return out


_PARTITIONS = text("""
    SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound
    FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
    WHERE i.inhparent = to_regclass('turns')
    ORDER BY c.relname
""")


def _bound(value: str) -> datetime | None:
    if value == "MINVALUE" or value == "MAXVALUE":
        return None
    raw = value.strip("'")
    if raw[-3] in "+-":
        raw += ":00"
    return datetime.fromisoformat(raw).astimezone(UTC)


def _parse(name: str, bound: str) -> Partition:
    """``FOR VALUES FROM ('…') TO ('…')`` or ``DEFAULT`` as a `Partition`."""
    if bound == "DEFAULT":
        return Partition(name, None, None, default=True)
    lower = bound.split("FROM (", 1)[1].split(")", 1)[0]
    upper = bound.split("TO (", 1)[1].split(")", 1)[0]
    return Partition(name, _bound(lower), _bound(upper))


async def partitions(engine: AsyncEngine) -> list[Partition]:
    """The turn log's partitions, by name."""
    async with engine.connect() as connection:
        rows = (await connection.execute(_PARTITIONS)).all()
    return [_parse(str(r[0]), str(r[1])) for r in rows]


async def ensure_ahead(
    engine: AsyncEngine, *, unit: Unit = "month", ahead: int | None = None,
    months: int | None = None,
) -> list[str]:
    """Make the partitions of this period and the ``ahead`` after it (``AHEAD`` by default;
    ``months`` is ``ahead`` for a monthly log) where no partition covers their range; the
    names made. Partitions of the other unit that have not started and hold no row are
    dropped first, so a change of unit takes effect from the next period."""
    if unit not in UNITS:
        raise ValueError(f"a turn log partition is a month or a day, not {unit!r}")
    periods = ahead if ahead is not None else months if months is not None else AHEAD[unit]
    async with engine.connect() as connection:
        now = (await connection.execute(text("SELECT now()"))).scalar_one()
    have = []
    for partition in await partitions(engine):
        if not partition.default and not await _drop_if_other_unit(engine, partition, unit, now):
            have.append(partition)
    made = []
    for n in range(periods + 1):
        start, end = period_start(now, unit, n), period_start(now, unit, n + 1)
        for lower, upper in _gaps(start, end, have):
            whole = (lower, upper) == (start, end)
            name = partition_name(lower, unit if whole else "day")
            try:
                await _attach(engine, name, lower, upper)
            except DBAPIError as exc:
                log.warning("turn log partition not made", extra={
                    "partition": name, "error": type(exc.orig).__name__})
                continue
            have.append(Partition(name, lower, upper))
            made.append(name)
    return made


async def _drop_if_other_unit(engine: AsyncEngine, partition: Partition, unit: Unit,
                              now: datetime) -> bool:
    """Drop ``partition`` when it is of another unit than ``unit``, has not started and holds
    no row; whether it was dropped."""
    if partition.start is None or partition.start <= now or _is_unit(partition, unit):
        return False
    try:
        async with engine.connect() as plain:
            connection = await plain.execution_options(isolation_level="READ COMMITTED")
            async with connection.begin():
                await connection.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
                held = (await connection.execute(text(
                    f"SELECT EXISTS (SELECT 1 FROM {partition.name})"))).scalar_one()
                if held:
                    return False
                await connection.execute(text(f"DROP TABLE {partition.name}"))
    except DBAPIError as exc:
        log.warning("turn log partition of another unit not dropped", extra={
            "partition": partition.name, "error": type(exc.orig).__name__})
        return False
    log.info("turn log partition dropped for the new unit",
             extra={"partition": partition.name, "unit": unit})
    return True


async def _attach(engine: AsyncEngine, name: str, start: datetime, end: datetime) -> None:
    """A partition: made as a table, then attached (SHARE UPDATE EXCLUSIVE on the log;
    the default partition is checked for rows of that month, ACCESS EXCLUSIVE on it alone)."""
    async with engine.connect() as plain:
        connection = await plain.execution_options(isolation_level="READ COMMITTED")
        async with connection.begin():
            await connection.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
            await connection.execute(text(
                f"CREATE TABLE {name} (LIKE turns INCLUDING DEFAULTS INCLUDING STORAGE"
                " INCLUDING COMPRESSION)"
            ))
            await connection.execute(text(
                f"ALTER TABLE turns ATTACH PARTITION {name} FOR VALUES"
                f" FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
            ))


_DELETE_DEFAULT = text(f"""
    DELETE FROM {DEFAULT} WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM {DEFAULT} WHERE created_at < :cutoff LIMIT :limit
    ))
""")

_DELETE_SOURCES = text("""
    DELETE FROM turn_sources WHERE id = ANY(ARRAY(
        SELECT id FROM turn_sources
        WHERE turn_id < coalesce((SELECT min(id) FROM turns), 9223372036854775807)
        ORDER BY id LIMIT :limit
    ))
""")

# Sessions whose every turn was before ``:before`` (their last save was), with nothing in
# progress: no run (a waiting or asking run keeps its session), no timer, no unsent reply.
_DELETE_SESSIONS = text("""
    DELETE FROM sessions WHERE id = ANY(ARRAY(
        SELECT s.id FROM sessions AS s
        WHERE s.updated_at < :before
          AND jsonb_array_length(coalesce(s.state -> 'runs', '[]'::jsonb)) = 0
          AND NOT EXISTS (SELECT 1 FROM timers AS t WHERE t.session_id = s.id)
          AND NOT EXISTS (SELECT 1 FROM outbox AS o
                          WHERE o.session_id = s.id AND o.published_at IS NULL)
        ORDER BY s.updated_at LIMIT :limit
    ))
""")


async def drop_expired(
    engine: AsyncEngine, *, older_than: timedelta, batch: int = 5000
) -> Dropped:
    """Drop the partitions wholly older than ``older_than`` (database clock), the default
    partition's rows that old, then the burst sources and the sessions nothing is left of."""
    async with engine.connect() as connection:
        now = (await connection.execute(text("SELECT now()"))).scalar_one()
    cutoff = now - older_than
    out = Dropped(partitions=[])
    for partition in await partitions(engine):
        if partition.default or partition.end is None or partition.end > cutoff:
            continue
        try:
            async with engine.connect() as plain:
                connection = await plain.execution_options(isolation_level="READ COMMITTED")
                async with connection.begin():
                    await connection.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
                    await connection.execute(text(f"DROP TABLE {partition.name}"))
        except DBAPIError as exc:
            log.warning("turn log partition not dropped; trying again next pass", extra={
                "partition": partition.name, "error": type(exc.orig).__name__})
            continue
        out.partitions.append(partition.name)
    out.default_rows = await _in_batches(engine, _DELETE_DEFAULT, {"cutoff": cutoff}, batch)
    if out.partitions or out.default_rows:
        out.turn_sources = await _in_batches(engine, _DELETE_SOURCES, {}, batch)
    # Every turn before the oldest partition left (or the cutoff) is gone.
    left = [p.start for p in await partitions(engine) if not p.default]
    oldest = min((s for s in left if s is not None), default=cutoff) \
        if all(s is not None for s in left) else None
    if oldest is not None:
        before = min(oldest, cutoff)
        out.sessions = await _in_batches(engine, _DELETE_SESSIONS, {"before": before}, batch)
    return out


# The search index of each partition (a child of ``ix_turns_words``) not yet compacted.
_WORD_INDEXES = text("""
    SELECT c.relname AS partition, x.relname AS index
    FROM pg_inherits AS i
    JOIN pg_class AS c ON c.oid = i.inhrelid
    JOIN pg_index AS ix ON ix.indrelid = c.oid
    JOIN pg_class AS x ON x.oid = ix.indexrelid
    JOIN pg_inherits AS p ON p.inhrelid = x.oid AND p.inhparent = to_regclass('ix_turns_words')
    WHERE i.inhparent = to_regclass('turns')
      AND coalesce(obj_description(x.oid, 'pg_class'), '') <> 'compacted'
""")


async def compact_closed(engine: AsyncEngine) -> list[str]:
    """Rebuild, once, the search index of each partition whose period has ended (REINDEX
    CONCURRENTLY: reads and saves go on). A GIN index grown a row at a time is two to four
    times the size of one built in one pass over the same rows
    (tests/store/test_search_size.py); a period that has ended gets no more turns, so one
    rebuild keeps it at the smaller size. Returns the indexes rebuilt."""
    async with engine.connect() as connection:
        now = (await connection.execute(text("SELECT now()"))).scalar_one()
        rows = (await connection.execute(_WORD_INDEXES)).all()
    ended = {p.name for p in await partitions(engine)
             if not p.default and p.end is not None and p.end <= now}
    done = []
    for partition, index in rows:
        if partition not in ended:
            continue
        try:
            async with engine.connect() as connection:
                await connection.execute(text(f"REINDEX INDEX CONCURRENTLY {index}"))
                await connection.execute(text(f"COMMENT ON INDEX {index} IS 'compacted'"))
        except DBAPIError as exc:
            log.warning("turn log search index not compacted", extra={
                "index": index, "error": type(exc.orig).__name__})
            continue
        done.append(str(index))
    return done


async def _in_batches(
    engine: AsyncEngine, statement: TextClause, parameters: dict[str, object], batch: int
) -> int:
    total = 0
    while True:
        async with engine.connect() as connection:
            result = await connection.execute(statement, {**parameters, "limit": batch})
        total += int(result.rowcount)
        if result.rowcount < batch:
            return total
