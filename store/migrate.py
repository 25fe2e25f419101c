"""Running the alembic migrations programmatically (`turnflow migrate`, the test fixture).

Alembic's environment drives asyncpg with `asyncio.run`, so these functions are synchronous
and must not be called from a running event loop; async callers use `upgrade_async`, which
runs the same work in a worker thread.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

import migrations
from store.urls import async_url

_MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent


def _config(url: str) -> Config:
    config = Config(str(_MIGRATIONS_DIR / "alembic.ini"))
    config.set_main_option("script_location", str(_MIGRATIONS_DIR))
    config.attributes["url"] = url
    return config


def head() -> str | None:
    """The newest revision the shipped migrations define."""
    return ScriptDirectory(str(_MIGRATIONS_DIR)).get_current_head()


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at `url` up to `revision` (default: the newest)."""
    command.upgrade(_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    """Migrate the database at `url` down to `revision` (`"base"` drops every table)."""
    command.downgrade(_config(url), revision)


def current(url: str) -> str | None:
    """Return the revision the database at `url` is at, or None when it is unmigrated."""
    found: list[str | None] = []

    def _read(connection: Connection) -> None:
        found.append(MigrationContext.configure(connection).get_current_revision())

    async def _run() -> None:
        engine = create_async_engine(async_url(url), poolclass=NullPool)
        try:
            async with engine.connect() as connection:
                await connection.run_sync(_read)
        finally:
            await engine.dispose()

    asyncio.run(_run())
    return found[0]


async def upgrade_async(url: str, revision: str = "head") -> None:
    """`upgrade` for callers inside an event loop."""
    await asyncio.to_thread(upgrade, url, revision)


async def downgrade_async(url: str, revision: str = "base") -> None:
    """`downgrade` for callers inside an event loop."""
    await asyncio.to_thread(downgrade, url, revision)
