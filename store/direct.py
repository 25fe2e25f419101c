"""The per-turn statements on the pooled asyncpg connection, past SQLAlchemy's execution layer.

The load, the save and the mark of a turn's published rows run for every input, thousands of
times a second per process. Through ``AsyncConnection.execute`` each pays for SQLAlchemy's
execution context, the greenlet bridge into asyncpg and a result object: about 100 µs of
client CPU of a save's ~370 µs in a side-by-side run (bench/README.md, "Store"). Here the same
SQL runs with asyncpg's ``fetchrow``/``execute`` on the very connection the pool hands out.

What stays the same:

- the connection comes from and goes back to the SQLAlchemy pool (size, recycling, reset on
  return), and runs outside any transaction, as the engine's autocommit connections do;
- asyncpg prepares each statement once per connection (its statement cache), as before; through
  a transaction-mode pooler (``DATABASE_POOLER=transaction``, store/pooler.py) its cache is off
  and each statement goes as the unnamed one, parsed again in the exchange that runs it;
- errors reach callers as SQLAlchemy raises them — ``IntegrityError`` for a constraint,
  ``ProgrammingError`` for syntax or access, ``InterfaceError`` for a broken client,
  ``DBAPIError`` for the rest, each with the driver's error as ``orig`` — and a connection
  that broke under the statement is invalidated in the pool and reported with
  ``connection_invalidated`` set, so the consumer's retry decisions read them unchanged.

Statements are written once with SQLAlchemy's ``:name`` parameters (``text()``) and turned into
asyncpg's ``$n`` form here at import.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
from sqlalchemy import TextClause
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

__all__ = ["Positional", "execute", "fetch", "fetchrow", "positional", "statement_listeners"]

# ":name" but not the second colon of a "::type" cast, nor a colon inside a word.
_PARAMETER = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")

statement_listeners: list[Callable[[str], None]] = []
"""Called with each statement's SQL before it runs (tests and benchmarks count round trips)."""


@dataclass(frozen=True, slots=True)
class Positional:
    """A statement in asyncpg's form: ``$n`` placeholders and the parameter name of each."""

    sql: str
    names: tuple[str, ...]

    def arguments(self, parameters: Mapping[str, Any]) -> list[Any]:
        missing = [name for name in self.names if name not in parameters]
        if missing:
            raise KeyError(f"statement parameters missing: {', '.join(missing)}")
        return [parameters[name] for name in self.names]


def positional(statement: TextClause | str) -> Positional:
    """``statement`` with each distinct ``:name`` numbered in order of first use."""
    sql = statement.text if isinstance(statement, TextClause) else statement
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return Positional(_PARAMETER.sub(number, sql), tuple(names))


async def fetchrow(
    engine: AsyncEngine, statement: Positional, parameters: Mapping[str, Any]
) -> asyncpg.Record | None:
    """Run ``statement`` and return its first row (None when it returned none)."""
    row: asyncpg.Record | None = await _run(engine, statement, parameters, "fetchrow")
    return row


async def fetch(
    engine: AsyncEngine, statement: Positional, parameters: Mapping[str, Any]
) -> list[asyncpg.Record]:
    """Run ``statement`` and return all its rows."""
    rows: list[asyncpg.Record] = await _run(engine, statement, parameters, "fetch")
    return rows


async def execute(
    engine: AsyncEngine, statement: Positional, parameters: Mapping[str, Any]
) -> int:
    """Run ``statement``; the number of rows it changed (from the command tag)."""
    tag: str = await _run(engine, statement, parameters, "execute")
    count = tag.rsplit(" ", 1)[-1]
    return int(count) if count.isdigit() else 0


async def _run(
    engine: AsyncEngine, statement: Positional, parameters: Mapping[str, Any], method: str
) -> Any:
    """``statement`` through the asyncpg connection's ``method`` on a pooled connection."""
    arguments = statement.arguments(parameters)
    async with engine.connect() as connection:
        driver = await _driver(connection)
        for listener in statement_listeners:
            listener(statement.sql)
        try:
            return await getattr(driver, method)(statement.sql, *arguments)
        except asyncio.CancelledError:
            # Cancelled mid-protocol: the connection's state is unknown, so it leaves the pool.
            await connection.invalidate()
            raise
        except Exception as error:
            raise await _as_sqlalchemy(connection, driver, statement, error) from error


async def _driver(connection: AsyncConnection) -> asyncpg.Connection:
    raw = await connection.get_raw_connection()
    driver = raw.driver_connection
    if not isinstance(driver, asyncpg.Connection):  # pragma: no cover - a misconfigured engine
        raise TypeError(f"expected an asyncpg connection, got {type(driver).__name__}")
    return driver


async def _as_sqlalchemy(
    connection: AsyncConnection,
    driver: asyncpg.Connection,
    statement: Positional,
    error: Exception,
) -> Exception:
    """The error as SQLAlchemy's asyncpg dialect would raise it; a connection that broke is
    invalidated first, so the pool never hands it out again."""
    broken = driver.is_closed() or isinstance(
        error, OSError | TimeoutError | asyncpg.PostgresConnectionError
    )
    if broken:
        await connection.invalidate(error)
    if isinstance(error, asyncpg.IntegrityConstraintViolationError):
        kind: type[sa_exc.DBAPIError] = sa_exc.IntegrityError
    elif isinstance(error, asyncpg.SyntaxOrAccessError):
        kind = sa_exc.ProgrammingError
    elif isinstance(error, asyncpg.InterfaceError):
        kind = sa_exc.InterfaceError
    elif isinstance(error, asyncpg.PostgresError):
        kind = sa_exc.OperationalError if broken else sa_exc.DBAPIError
    elif broken:
        kind = sa_exc.OperationalError
    else:
        return error  # not the database's: a parameter the codec refused, say
    return kind(statement.sql, None, error, connection_invalidated=broken)
