"""Running through a connection pooler in transaction mode (PgBouncer's ``pool_mode =
transaction``): ``DATABASE_POOLER=transaction``.

Such a pooler lends one server connection to a client for one transaction only; between two
transactions the client may be on another server connection, one another client used a moment
ago. Two things asyncpg does by default break there:

- it names its prepared statements ``__asyncpg_stmt_N__``, counting per client connection and
  caching them: the next client handed the same server connection finds the name taken
  ("prepared statement ... already exists") or a cached statement missing;
- it prepares a statement (Parse, Describe, Sync) and runs it (Bind, Execute, Sync) in two
  exchanges. Outside a transaction the pooler may hand the second exchange to another server
  connection, where the statement does not exist, or where the unnamed statement is another
  client's.

So in this mode nothing is cached (asyncpg's ``statement_cache_size=0``, SQLAlchemy's
``prepared_statement_cache_size=0``), SQLAlchemy's statements are named uniquely (a uuid, never
reused), and every statement that is not already inside a transaction runs in one of its own
(BEGIN, prepare, run, COMMIT), so both exchanges reach the same server connection. Explicit
transactions (claiming timers, fetching the outbox) are unchanged: they hold their server
connection throughout. Session state is never relied on: the service sets no session
parameter after connecting, takes no session advisory lock, uses no LISTEN/NOTIFY and no
temporary table; what it sets is ``SET LOCAL``, inside the transaction that needs it.

Startup parameters other than ``application_name`` are refused by PgBouncer and would not reach
the pooled server connections anyway: `startup_settings` keeps only that one, and a caller that
needs another (the inspector's read-only, JIT-less reads) sets it with ``SET LOCAL``.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, NoReturn, TypeVar

import asyncpg
from sqlalchemy.dialects.postgresql.asyncpg import (
    AsyncAdapt_asyncpg_connection,
    AsyncAdapt_asyncpg_cursor,
    AsyncAdapt_asyncpg_dbapi,
)
from sqlalchemy.util import await_only

__all__ = [
    "POOLER_MODES",
    "Pooler",
    "TransactionPooledConnection",
    "engine_options",
    "in_own_transaction",
    "is_transaction_pooled",
    "startup_settings",
]

T = TypeVar("T")
Pooler = Literal["none", "transaction"]
POOLER_MODES: tuple[Pooler, ...] = ("none", "transaction")

# The startup parameters PgBouncer passes on (its `track_extra_parameters` aside).
_FORWARDED_SETTINGS = frozenset({"application_name"})


class TransactionPooledConnection(asyncpg.Connection):  # type: ignore[misc]
    """An asyncpg connection opened through a transaction-mode pooler: the marker
    `store.direct` reads to run each statement in a transaction of its own."""


def is_transaction_pooled(driver: asyncpg.Connection) -> bool:
    """Whether ``driver`` was opened in pooler mode (``engine_options(pooler="transaction")``)."""
    # Not isinstance: asyncpg's metaclass makes every connection an instance of any subclass.
    return issubclass(type(driver), TransactionPooledConnection)


def _unique_name() -> str:
    """A prepared statement's name no other client of the pooler can have taken."""
    return f"__turnflow_{uuid.uuid4().hex}__"


class _OneServerCursor(AsyncAdapt_asyncpg_cursor):
    """SQLAlchemy's asyncpg cursor, each statement outside a transaction wrapped in one of its
    own so its prepare and its run reach the same server connection."""

    __slots__ = ()

    @property
    def _driver(self) -> asyncpg.Connection:
        driver: asyncpg.Connection = self._connection
        return driver

    def _in_transaction(self) -> bool:
        """Whether the statement runs inside a transaction already: asyncpg's, or the one
        SQLAlchemy begins before it (any isolation level but autocommit)."""
        return not self._adapt_connection.autocommit or self._driver.is_in_transaction()

    # SQLAlchemy's adapter methods are untyped: the calls to them are what mypy flags.
    async def _prepare_and_execute(self, operation: Any, parameters: Any) -> None:
        run = super()._prepare_and_execute
        if self._in_transaction():
            await run(operation, parameters)  # type: ignore[no-untyped-call]
            return
        await in_own_transaction(
            self._driver,
            lambda: run(operation, parameters),  # type: ignore[no-untyped-call]
            self._handle_exception,
        )

    async def _executemany(self, operation: Any, seq_of_parameters: Any) -> Any:
        run = super()._executemany
        if self._in_transaction():
            return await run(operation, seq_of_parameters)  # type: ignore[no-untyped-call]
        return await in_own_transaction(
            self._driver,
            lambda: run(operation, seq_of_parameters),  # type: ignore[no-untyped-call]
            self._handle_exception,
        )


async def in_own_transaction(
    driver: asyncpg.Connection,
    run: Callable[[], Awaitable[T]],
    raise_as: Callable[[Exception], NoReturn] | None = None,
) -> T:
    """``run()`` inside a transaction of its own on ``driver``: committed when it returns,
    rolled back when it raises. A failed BEGIN or COMMIT goes through ``raise_as`` (the
    caller's translation of driver errors) when given. A rollback that fails leaves the
    connection in an unknown state, so it is closed (the pool replaces it) and the error of
    ``run()`` is what the caller sees."""
    transaction = driver.transaction()
    try:
        await transaction.start()
    except Exception as error:
        if raise_as is None:
            raise
        raise_as(error)
    try:
        result = await run()
    except BaseException:
        if not driver.is_closed():
            try:
                await transaction.rollback()
            except BaseException:
                driver.terminate()
        raise
    try:
        await transaction.commit()
    except Exception as error:
        if raise_as is None:
            raise
        raise_as(error)
    return result


class _OneServerConnection(AsyncAdapt_asyncpg_connection):
    __slots__ = ()
    _cursor_cls = _OneServerCursor


class _OneServerDbapi(AsyncAdapt_asyncpg_dbapi):
    """SQLAlchemy's asyncpg DBAPI adapter, building connections whose cursors keep a statement
    on one server connection."""

    def connect(self, *arg: Any, **kw: Any) -> Any:
        creator_fn = kw.pop("async_creator_fn", self.asyncpg.connect)
        kw.pop("prepared_statement_cache_size", None)
        kw.pop("prepared_statement_name_func", None)
        return await_only(
            _OneServerConnection.create(
                self,
                creator_fn(*arg, **kw),
                prepared_statement_cache_size=0,
                prepared_statement_name_func=_unique_name,
            )
        )


def startup_settings(settings: Mapping[str, str], pooler: Pooler) -> dict[str, str]:
    """The ``server_settings`` to send when connecting: all of them directly, only those the
    pooler forwards through one."""
    if pooler == "none":
        return dict(settings)
    return {k: v for k, v in settings.items() if k in _FORWARDED_SETTINGS}


def engine_options(pooler: Pooler, connect_args: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments for ``create_async_engine`` in ``pooler`` mode, ``connect_args`` (the
    caller's) completed; ``ValueError`` for a mode that is not one of `POOLER_MODES`."""
    if pooler not in POOLER_MODES:
        raise ValueError(f"unknown pooler mode {pooler!r}: one of {', '.join(POOLER_MODES)}")
    args = dict(connect_args)
    if pooler == "none":
        return {"connect_args": args}
    server_settings = args.get("server_settings")
    if server_settings is not None:
        args["server_settings"] = startup_settings(server_settings, pooler)
    args.update(statement_cache_size=0, connection_class=TransactionPooledConnection)
    dbapi = _OneServerDbapi(asyncpg)  # type: ignore[no-untyped-call]
    return {"connect_args": args, "module": dbapi}
