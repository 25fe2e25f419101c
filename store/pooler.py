"""Running through a connection pooler in transaction mode (PgBouncer's ``pool_mode =
transaction``): ``DATABASE_POOLER=transaction``.

Such a pooler lends one server connection to a client for one transaction only; between two
transactions the client may be on another server connection, one another client used a moment
ago. Two things asyncpg does by default break there:

- it names its prepared statements ``__asyncpg_stmt_N__``, counting per client connection and
  caching them: the next client handed the same server connection finds the name taken
  ("prepared statement ... already exists") or a cached statement missing ("... does not
  exist");
- a named statement is prepared (Parse, Describe, Sync) and run (Bind, Execute, Sync) in two
  exchanges, and outside a transaction the pooler may hand the second one to another server
  connection, where the statement does not exist.

So in this mode no statement is named or cached: asyncpg's ``statement_cache_size=0``,
SQLAlchemy's ``prepared_statement_cache_size=0`` and an empty name for the statements SQLAlchemy
prepares. asyncpg then runs every statement as the unnamed one and sends its Parse again in the
exchange that binds and runs it (Parse, Bind, Execute, Sync: what asyncpg does for PgBouncer when
its cache is off), so whichever server connection that exchange reaches, it runs the client's
own statement — never a name another client took, never another client's unnamed statement. The
first exchange (Parse, Describe) only reads the statement's parameter and column types. Explicit
transactions (claiming timers, fetching the outbox) hold their server connection throughout, as
before. Nothing names a statement the server keeps, so nothing accumulates on the pooler's server
connections.

Session state is never relied on: the service sets no session parameter after connecting, takes
no session advisory lock, uses no LISTEN/NOTIFY and no temporary table; what it sets is
``SET LOCAL``, inside the transaction that needs it. Startup parameters other than
``application_name`` are refused by PgBouncer and would not reach the pooled server connections
anyway: `startup_settings` keeps only that one, and a caller that needs another (the inspector's
read-only, JIT-less reads) sets it with ``SET LOCAL``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["POOLER_MODES", "Pooler", "engine_options", "startup_settings"]

Pooler = Literal["none", "transaction"]
POOLER_MODES: tuple[Pooler, ...] = ("none", "transaction")

# The startup parameters PgBouncer passes on (its `track_extra_parameters` aside).
_FORWARDED_SETTINGS = frozenset({"application_name"})


def _unnamed() -> str:
    """The name SQLAlchemy gives a statement it prepares: none (asyncpg's unnamed statement,
    which it sends again with each run while its cache is off)."""
    return ""


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
    args.update(
        statement_cache_size=0, prepared_statement_cache_size=0,
        prepared_statement_name_func=_unnamed,
    )
    return {"connect_args": args}
