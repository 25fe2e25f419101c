"""Online-safe DDL for the revisions: what keeps `turnflow migrate` from stalling live turns.

Two things stall a live deployment during a migration, and each has its helper here:

- An index built inside the migration's transaction (`CREATE INDEX` without CONCURRENTLY) holds
  a SHARE lock on its table for the whole build, so every turn's write to `turns` waits for it
  (seconds per million rows). `create_index` builds it `CONCURRENTLY` in alembic's autocommit
  block instead; an INVALID index an interrupted build left behind (`pg_index.indisvalid`
  false) is dropped and built again, a valid one of that name is kept.
- DDL that needs a table's ACCESS EXCLUSIVE lock even for an instant (ADD COLUMN, a constraint)
  queues behind any long transaction on that table, and every later reader and writer of the
  table queues behind it. `with_lock_retries` runs such DDL under a short `lock_timeout` and,
  when the lock is not granted in time, rolls back to a savepoint, sleeps with back-off and
  tries again (as GitLab's `with_lock_retries` does), then commits at once so the lock is not
  held for the rest of the revision. After its last attempt it raises `LockNotGranted` with a
  one-line reason; the revision is not stamped and `turnflow migrate` can simply be run again.

Every step is written to be run again after an interruption (IF NOT EXISTS, INVALID index
rebuild), because an autocommit block commits the revision's earlier work before alembic
stamps the revision.

The lock timeout and the number of attempts come from `TURNFLOW_MIGRATE_LOCK_TIMEOUT_MS`
(default 200) and `TURNFLOW_MIGRATE_LOCK_ATTEMPTS` (default 30; about a minute and a half of
back-off in all).
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable

import sqlalchemy as sa
from alembic import op
from sqlalchemy.exc import DBAPIError

__all__ = [
    "HOT_TABLES",
    "LockNotGranted",
    "commit",
    "create_index",
    "drop_index",
    "lint_ignore",
    "lock_attempts",
    "lock_timeout_ms",
    "set_lock_timeout",
    "with_lock_retries",
]

# The tables every turn reads or writes: their locks must never be held for long.
HOT_TABLES = ("sessions", "turns", "outbox", "timers")

_LOCK_NOT_AVAILABLE = "55P03"
# Why a CONCURRENTLY build or drop runs with no lock_timeout.
_CONCURRENT_WAITS = (
    "CONCURRENTLY: its SHARE UPDATE EXCLUSIVE lock queues no read or write, and its waits for "
    "older transactions must not time out (a build cut short leaves an INVALID index)"
)
_MAX_SLEEP_S = 5.0


class LockNotGranted(RuntimeError):
    """A revision's DDL did not get its table's lock within the retries: nothing was changed."""


def _positive_int(name: str, default: int, most: int) -> int:
    """An environment variable holding 1..`most` in ASCII digits, else `default` when unset."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not re.fullmatch(r"[0-9]{1,9}", raw) or not 0 < int(raw) <= most:
        raise ValueError(f"{name} must be a whole number from 1 to {most}, not {raw[:20]!r}")
    return int(raw)


def lock_timeout_ms() -> int:
    """How long one attempt waits for a table lock before giving it up."""
    return _positive_int("TURNFLOW_MIGRATE_LOCK_TIMEOUT_MS", 200, 60_000)


def lock_attempts() -> int:
    """How many times `with_lock_retries` asks for the lock before raising `LockNotGranted`."""
    return _positive_int("TURNFLOW_MIGRATE_LOCK_ATTEMPTS", 30, 1_000)


def _backoff(attempt: int) -> float:
    """0.1 s doubling to 5 s, with jitter so two migrators do not retry in step."""
    return min(_MAX_SLEEP_S, 0.1 * 2**attempt) * random.uniform(0.5, 1.0)


def _sqlstate(exc: DBAPIError) -> str | None:
    orig = exc.orig
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return str(code) if code else None


def table_exists(name: str) -> bool:
    """Whether `name` is a table already (never offline, where nothing can be asked): a revision
    that only creates tables checks it first, so a rerun over its own work does nothing."""
    if op.get_context().as_sql:
        return False
    found = op.get_bind().execute(sa.text("SELECT to_regclass(:name)"), {"name": name}).scalar()
    return found is not None


def lint_ignore(rules: str, why: str) -> None:
    """In `--sql` output (what squawk reads), mark the next statement as exempt from `rules`,
    with the reason above it. Online it does nothing."""
    context = op.get_context()
    if context.as_sql:
        buffer = context.impl.output_buffer
        assert buffer is not None
        buffer.write(f"-- {why}\n-- squawk-ignore {rules}\n")


def set_lock_timeout() -> None:
    """`SET LOCAL lock_timeout` for the rest of the revision's transaction: for revisions that
    only create tables (nothing to wait for, but a reference to another table locks it)."""
    op.execute(f"SET LOCAL lock_timeout = '{lock_timeout_ms()}ms'")


def commit() -> None:
    """Commit the revision's work so far (and release its locks); a new transaction follows."""
    with op.get_context().autocommit_block():
        pass


def with_lock_retries(ddl: Callable[[], None], *, what: str = "DDL") -> None:
    """Run `ddl` (alembic `op` calls) under a short lock_timeout, retried, then commit.

    `ddl` must only need a brief lock (catalog changes, no table rewrite or scan) and be safe to
    run again (`IF NOT EXISTS`), since its commit comes before the revision is stamped.
    """
    context = op.get_context()
    timeout = lock_timeout_ms()
    if context.as_sql:
        op.execute(f"SET LOCAL lock_timeout = '{timeout}ms'")
        ddl()
        commit()
        return
    connection = op.get_bind()
    attempts = lock_attempts()
    for attempt in range(attempts):
        savepoint = connection.begin_nested()
        try:
            connection.exec_driver_sql(f"SET LOCAL lock_timeout = '{timeout}ms'")
            ddl()
        except DBAPIError as exc:
            savepoint.rollback()
            if _sqlstate(exc) != _LOCK_NOT_AVAILABLE:
                raise
            if attempt + 1 < attempts:
                time.sleep(_backoff(attempt))
            continue
        savepoint.commit()
        commit()
        return
    raise LockNotGranted(
        f"{what}: lock not granted in {attempts} tries of {timeout} ms; a long transaction "
        "holds the table (see pg_stat_activity); this step was not applied, run migrate again"
    )


def _index_valid(name: str) -> bool | None:
    """True or False by `pg_index.indisvalid` when the index exists, else None."""
    row = op.get_bind().execute(
        sa.text(
            "SELECT i.indisvalid FROM pg_index AS i"
            " JOIN pg_class AS c ON c.oid = i.indexrelid"
            " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
            " WHERE c.relname = :name AND n.nspname = current_schema()"
        ),
        {"name": name},
    ).first()
    return None if row is None else bool(row[0])


def create_index(
    name: str,
    table: str,
    columns: str,
    *,
    unique: bool = False,
    using: str | None = None,
    where: str | None = None,
) -> None:
    """`CREATE INDEX CONCURRENTLY IF NOT EXISTS name ON table [USING using] columns [WHERE]`.

    `columns` is the parenthesised column or expression list. Writes to the table go on during
    the build. An INVALID index of that name (a build interrupted earlier) is dropped first; a
    valid one is kept as it is.
    """
    context = op.get_context()
    method = f" USING {using}" if using else ""
    predicate = f" WHERE {where}" if where else ""
    kind = "UNIQUE INDEX" if unique else "INDEX"
    with context.autocommit_block():
        if not context.as_sql and _index_valid(name) is False:
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        lint_ignore("require-lock-timeout", _CONCURRENT_WAITS)
        op.execute(
            f"CREATE {kind} CONCURRENTLY IF NOT EXISTS {name} ON {table}{method} {columns}"
            f"{predicate}"
        )


def drop_index(name: str) -> None:
    """`DROP INDEX CONCURRENTLY IF EXISTS name`: queries of the table go on meanwhile."""
    with op.get_context().autocommit_block():
        lint_ignore("require-lock-timeout", _CONCURRENT_WAITS)
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
