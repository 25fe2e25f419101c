"""Alembic environment: runs migrations online over asyncpg.

Every revision runs in its own transaction; after the run the database's compatibility record
is rewritten (`migrations/compatibility.py`). The URL comes from `config.attributes["url"]`
(set by `store.migrate`) or, for a bare `alembic -c migrations/alembic.ini upgrade head`, from
`DATABASE_URL`.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from migrations import compatibility
from store.schema import metadata
from store.urls import async_url

config = context.config


def _url() -> str:
    url = config.attributes.get("url") or os.environ.get("DATABASE_URL")
    if not url:
        raise RuntimeError("no database URL: set DATABASE_URL")
    return async_url(url).render_as_string(hide_password=False)


def _run(connection: Connection) -> None:
    # One transaction per revision: a revision's autocommit blocks (migrations/online.py: index
    # builds CONCURRENTLY, DDL under lock retries) commit only that revision's work so far.
    context.configure(
        connection=connection, target_metadata=metadata, transaction_per_migration=True
    )
    with context.begin_transaction():
        context.run_migrations()
    # After every run, up or down: which releases may run on the schema as it now is.
    compatibility.write(connection, context.script)


async def _run_online() -> None:
    engine = create_async_engine(_url(), poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
            await connection.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    # `--sql`: each revision between its own BEGIN and COMMIT, as it runs online.
    context.configure(
        url=_url(), target_metadata=metadata, literal_binds=True, transaction_per_migration=True
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_run_online())
