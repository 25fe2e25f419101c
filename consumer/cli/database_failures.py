"""What a database error that ends a command says, and its exit code.

A long-running command ends on a database error only when retrying cannot help or its start
failed (outages inside a running service are retried where they happen). Its one line then
names the cause — unreachable, authentication failed, no such database, a transaction-mode
pooler the settings do not declare, the schema missing or behind (``turnflow migrate``),
permission denied, a read-only database, or a statement the server refused — with the
server's own message, so an operator knows which setting or grant to fix without a traceback.
The cause is read from the SQLSTATE the server sent (asyncpg's ``sqlstate``, on the error or
on the driver error under SQLAlchemy's); an error without one (a dropped connection, a
timeout) is an outage.

Exit codes (docs/production.md, "Exit codes"): 1 unreachable, 2 a setting to fix (bad
credentials, no such database, ``DATABASE_POOLER``), 4 the schema (run ``turnflow migrate``),
5 refused (a grant, a read-only server, a statement).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["EXIT_REFUSED", "EXIT_SCHEMA", "DatabaseFailure", "describe"]

EXIT_UNREACHABLE = 1  # as consumer.cli.running
EXIT_CONFIG = 2
EXIT_SCHEMA = 4
EXIT_REFUSED = 5

Kind = Literal[
    "unreachable", "authentication", "no-database", "pooler", "schema", "permission",
    "read-only", "refused",
]

_MAX_MESSAGE = 300
# Five digits or upper-case letters; anything else is not a SQLSTATE and is not shown as one.
_SQLSTATE = re.compile(r"[0-9A-Z]{5}")


@dataclass(frozen=True)
class DatabaseFailure:
    """A database error as the command reports it: its kind, one line, and the exit code."""

    kind: Kind
    line: str
    exit_code: int


# SQLSTATEs by kind; a class (two characters) covers every code in it.
_UNREACHABLE = ("08", "57P01", "57P02", "57P03", "53300", "58")
_AUTHENTICATION = ("28",)
_NO_DATABASE = ("3D000",)
_SCHEMA = ("42P01", "42703", "42883", "3F000")
_PERMISSION = ("42501",)
_READ_ONLY = ("25006",)
# A prepared statement's name taken or missing: what a transaction-mode pooler does to a client
# that keeps its statements on a connection (store/pooler.py).
_POOLER = ("42P05", "26000")


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_MESSAGE else flat[: _MAX_MESSAGE - 1] + "…"


def _driver_error(error: BaseException) -> tuple[str | None, str]:
    """The SQLSTATE and the server's message, from the first error in ``error``'s chain (itself,
    SQLAlchemy's ``orig``, their causes) that carries a SQLSTATE; else (None, its text)."""
    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending:
        candidate = pending.pop(0)
        if id(candidate) in seen:
            continue
        seen.add(id(candidate))
        state = getattr(candidate, "sqlstate", None)
        if isinstance(state, str) and _SQLSTATE.fullmatch(state):
            message = getattr(candidate, "message", None)
            if not isinstance(message, str) or not message:
                message = str(candidate)
            return state, message
        for nested in (getattr(candidate, "orig", None), candidate.__cause__,
                       candidate.__context__):
            if isinstance(nested, BaseException):
                pending.append(nested)
    orig = getattr(error, "orig", None)
    shown = orig if isinstance(orig, BaseException) else error
    text = str(shown)
    return None, f"{type(shown).__name__}: {text}" if text else type(shown).__name__


def _pooler_login(state: str, message: str) -> bool:
    """PgBouncer refuses a login with its own protocol-violation code (08P01) and says so in
    the message ("SASL authentication failed", "password authentication failed ...")."""
    return state == "08P01" and "authentication failed" in message.lower()


# A refusal's SQLSTATEs, its kind, its line around the server's own words, and its exit code,
# in the order they are checked.
_REFUSALS: tuple[tuple[tuple[str, ...], str, tuple[str, str], int], ...] = (
    (_AUTHENTICATION, "authentication", ("PostgreSQL refused the login",
                                         "; check the user and password in DATABASE_URL"),
     EXIT_CONFIG),
    (_NO_DATABASE, "no-database", ("PostgreSQL has no such database", "; check DATABASE_URL"),
     EXIT_CONFIG),
    (_POOLER, "pooler", ("PostgreSQL refused a prepared statement",
                         "; behind PgBouncer in transaction mode, set DATABASE_POOLER=transaction"),
     EXIT_CONFIG),
    (_SCHEMA, "schema", ("the database schema is missing or behind", "; run `turnflow migrate`"),
     EXIT_SCHEMA),
    (_PERMISSION, "permission", ("PostgreSQL denied permission",
                                 "; grant DATABASE_URL's role access to turnflow's tables (the "
                                 "role `turnflow migrate` ran as owns them)"),
     EXIT_REFUSED),
    (_READ_ONLY, "read-only", ("the database is read-only",
                               "; point DATABASE_URL at the primary"), EXIT_REFUSED),
)


def _matches(state: str, codes: tuple[str, ...]) -> bool:
    return any(state == code or (len(code) == 2 and state.startswith(code)) for code in codes)


def describe(error: BaseException) -> DatabaseFailure:
    """The report of ``error`` (a SQLAlchemy ``DBAPIError``, an asyncpg error, or any other
    exception a database call raised); never raises."""
    try:
        state, message = _driver_error(error)
    except Exception:  # a hostile __str__ or attribute: still one line, as an outage
        state, message = None, type(error).__name__
    server = _one_line(message)
    if state is not None and _pooler_login(state, server):
        return DatabaseFailure(
            "authentication", f"the pooler refused the login: {server} (SQLSTATE {state}); "
            "check the user and password in DATABASE_URL", EXIT_CONFIG)
    if state is None or _matches(state, _UNREACHABLE):
        said = server if state is None else f"{server} (SQLSTATE {state})"
        return DatabaseFailure("unreachable", f"PostgreSQL is unreachable: {said}",
                               EXIT_UNREACHABLE)
    said = f"{server} (SQLSTATE {state})"
    for codes, kind, (before, after), code in _REFUSALS:
        if _matches(state, codes):
            return DatabaseFailure(kind, f"{before}: {said}{after}", code)
    return DatabaseFailure("refused", f"PostgreSQL refused a statement: {said}", EXIT_REFUSED)
