"""Running the alembic migrations programmatically (`turnflow migrate`, the test fixture).

Alembic's environment drives asyncpg with `asyncio.run`, so these functions are synchronous
and must not be called from a running event loop; async callers use `upgrade_async`, which
runs the same work in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

import migrations
from migrations import online
from migrations.online import LockNotGranted
from store.urls import async_url

T = TypeVar("T")

__all__ = [
    "LockNotGranted",
    "Verdict",
    "compatibility",
    "current",
    "downgrade",
    "downgrade_async",
    "head",
    "knows",
    "settings_problem",
    "upgrade",
    "upgrade_async",
]

_MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent


def _config(url: str) -> Config:
    config = Config(str(_MIGRATIONS_DIR / "alembic.ini"))
    config.set_main_option("script_location", str(_MIGRATIONS_DIR))
    config.attributes["url"] = url
    return config


def head() -> str | None:
    """The newest revision the shipped migrations define."""
    return ScriptDirectory(str(_MIGRATIONS_DIR)).get_current_head()


def settings_problem() -> str | None:
    """A one-line reason when the lock retry settings in the environment are unusable."""
    try:
        online.lock_timeout_ms()
        online.lock_attempts()
    except ValueError as exc:
        return str(exc)
    return None


def knows(revision: str) -> bool:
    """Whether the shipped migrations define `revision` (any text: a database's word)."""
    script = ScriptDirectory(str(_MIGRATIONS_DIR))
    return revision in {found.revision for found in script.walk_revisions()}


def _shown(revision: str) -> str:
    """A revision read from the database, as one short printable word."""
    escaped = revision.encode("unicode_escape").decode("ascii")
    return escaped if len(escaped) <= 40 else escaped[:40] + "..."


@dataclass(frozen=True)
class Verdict:
    """What an older release may do on a database a newer release migrated: `runs` (go on,
    migrating nothing) or not, with the one-line reason either way."""

    runs: bool
    reason: str


def _record(url: str) -> tuple[str | None, tuple[str, str] | None]:
    """The database's alembic revision and its compatibility record (revision, oldest)."""

    def _read(connection: Connection) -> tuple[str | None, tuple[str, str] | None]:
        current = MigrationContext.configure(connection).get_current_revision()
        record = None
        if connection.scalar(text("SELECT to_regclass('schema_compatibility')")) is not None:
            row = connection.execute(
                text("SELECT revision, oldest_compatible FROM schema_compatibility")
            ).first()
            record = None if row is None else (str(row[0]), str(row[1]))
        return current, record

    return _read_on(url, _read)


def _read_on(url: str, read: Callable[[Connection], T]) -> T:
    """``read`` run on a connection to ``url``, from synchronous code (as alembic's commands
    are called); its own event loop, so never from inside one."""

    async def _run() -> T:
        engine = create_async_engine(async_url(url), poolclass=NullPool)
        try:
            async with engine.connect() as connection:
                return await connection.run_sync(read)
        finally:
            await engine.dispose()

    return asyncio.run(_run())


def compatibility(url: str) -> Verdict | None:
    """None when the database is at a revision these migrations know (or unmigrated): upgrade
    as usual. Otherwise a newer release migrated it, and its compatibility record says whether
    this release's code may run on it: when this release's head is at or after the record's
    oldest compatible revision."""
    read, record = _record(url)
    if read is None or knows(read):
        return None
    own = head()
    current = _shown(read)
    if record is None:
        return Verdict(False, (
            f"the database is at revision {current}, newer than this release's {own}, and "
            "declares no compatible release: deploy the release that migrated it, or newer"
        ))
    revision, oldest_read = record
    oldest = _shown(oldest_read)
    if revision != read:
        return Verdict(False, (
            f"the database is at revision {current} but its compatibility record names "
            f"{_shown(revision)}: run the newer release's migrate to rewrite it"
        ))
    if not knows(oldest_read):
        return Verdict(False, (
            f"the database is at revision {current}, which runs only releases at revision "
            f"{oldest} or newer; this release is at {own}: deploy a release at {oldest} or newer"
        ))
    return Verdict(True, (
        f"the database is at revision {current} of a newer release, which declares releases "
        f"from revision {oldest} on compatible; this release ({own}) runs on it, nothing "
        "migrated"
    ))


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at `url` up to `revision` (default: the newest)."""
    command.upgrade(_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    """Migrate the database at `url` down to `revision` (`"base"` drops every table)."""
    command.downgrade(_config(url), revision)


def current(url: str) -> str | None:
    """Return the revision the database at `url` is at, or None when it is unmigrated."""

    def _read(connection: Connection) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    return _read_on(url, _read)


async def upgrade_async(url: str, revision: str = "head") -> None:
    """`upgrade` for callers inside an event loop."""
    await asyncio.to_thread(upgrade, url, revision)


async def downgrade_async(url: str, revision: str = "base") -> None:
    """`downgrade` for callers inside an event loop."""
    await asyncio.to_thread(downgrade, url, revision)
