"""A throwaway migrated database for one benchmark run, on a server the run may start itself.

The server is the one at ``DATABASE_URL`` or, when that is unset, an embedded PostgreSQL in a
temporary directory. The database gets a fresh random name, so runs never meet; it is dropped,
the embedded server stopped and its directory removed when the caller's ``ExitStack`` closes,
in that order.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url

from store import migrate
from store.embedded import EmbeddedPostgres
from store.urls import plain_url

__all__ = ["ScratchDatabase", "execute_sql", "scratch_database"]


@dataclass(frozen=True)
class ScratchDatabase:
    url: str
    """Plain ``postgresql://`` URL of the migrated database."""
    where: str
    """Where the server came from: ``DATABASE_URL`` or ``embedded PostgreSQL``."""


async def execute_sql(url: str, sql: str) -> None:
    """Run ``sql`` (one or more statements, no parameters) on its own connection to ``url``."""
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


def scratch_database(stack: ExitStack, *, prefix: str) -> ScratchDatabase:
    """Create and migrate the database; ``prefix`` (say ``turnflow-bench``) names the embedded
    server's directory (``<prefix>-pg-…``) and the database (``<prefix>_<8 hex>``, dashes as
    underscores). Call from synchronous code: it runs its own event loops."""
    server_url = os.environ.get("DATABASE_URL")
    where = "DATABASE_URL"
    if not server_url:
        data_dir = Path(tempfile.mkdtemp(prefix=f"{prefix}-pg-"))
        stack.callback(shutil.rmtree, data_dir, ignore_errors=True)
        server = EmbeddedPostgres(data_dir / "data")
        server_url = server.start()
        stack.callback(server.stop)
        where = "embedded PostgreSQL"
    server_url = plain_url(server_url)
    name = f"{prefix.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
    asyncio.run(execute_sql(server_url, f'CREATE DATABASE "{name}"'))
    stack.callback(
        lambda: asyncio.run(execute_sql(server_url, f'DROP DATABASE "{name}" WITH (FORCE)'))
    )
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    migrate.upgrade(url)
    return ScratchDatabase(url=url, where=where)
