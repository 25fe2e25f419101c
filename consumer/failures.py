"""Errors no retry can fix: one classification shared by the consumer, the scheduler and the relay.

Some records carry data the service can never hold or send: a NUL or a lone surrogate in a
string, a time pushed out of range by its offset, a number PostgreSQL refuses, a value larger
than the broker takes. Such a record fails the same way on every attempt, so retrying it only
delays whatever waits behind it (a session's next input, a partition's timers, a session's
replies). ``cannot_succeed`` names these errors with a reason code, and each loop refuses the
record at once under that code: the consumer dead-letters the input, the schedule intake skips
the entry, the relay sets the row aside.

The test is by type and SQLSTATE class, never by message text, and looks through the chain of
wrapped errors (SQLAlchemy wraps the driver's error, which may wrap the codec's):

- ``unstorable-text``: text the database cannot store (``UnicodeError`` from encoding a lone
  surrogate; SQLSTATE 22021 character not in repertoire, 22P05 untranslatable character, the
  form a NUL takes);
- ``out-of-range``: ``OverflowError``; SQLSTATE 22003 numeric and 22008 datetime overflow;
- ``too-large``: the broker's or the producer's size limit (``MessageSizeTooLargeError`` and
  its kin);
  SQLSTATE class 54 (program limit exceeded);
- ``invalid-data``: any other data exception (SQLSTATE class 22), ``ValueError`` or
  ``RecursionError`` raised by the data itself.

A connection that broke under a statement is never one of these: it is an outage, whatever
the class of the error that reported it.

``database_unavailable`` names the opposite: a database, or the way to it, that cannot take
this write *now* but will soon, during a failover, a restart, a pooler's restart or a network
blip. By SQLSTATE: a connection-level failure (class 08), a primary switched to read-only while
a managed failover moves it (25006), a transaction the server rolled back to let others on
(class 40: serialization failure, deadlock), insufficient resources (class 53: no connection
slot, out of memory, disk full), a server shutting down, starting up or dropping the session
(57P01 to 57P05), a system or I/O error (class 58), an internal server error (class XX). By
the client: a connection SQLAlchemy invalidated under a statement; asyncpg's own
``InterfaceError`` (a closed connection, another operation in progress: not its subclasses,
which name bad arguments or configuration), a protocol the server broke off
(``ProtocolError``), a schema cache a concurrent change made stale, no listed host accepting
writes (``TargetServerAttributeNotMatched`` for a multi-host URL with
``target_session_attrs=read-write`` while every server is read-only or in recovery); and the
operating system's connection errors and time-outs anywhere in the chain. Every loop retries
these with its outage back-off, never counts them toward a record's retry budget, and never
dead-letters or sets aside a record for them: the record is fine, the server is between two
states.
"""

from __future__ import annotations

from typing import Literal

from aiokafka.errors import (
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
)
from asyncpg.exceptions import InterfaceError as AsyncpgInterfaceError
from asyncpg.exceptions import (
    OutdatedSchemaCacheError,
    ProtocolError,
    TargetServerAttributeNotMatched,
)
from sqlalchemy.exc import DBAPIError

__all__ = [
    "UnfixableReason", "cannot_succeed", "database_read_only", "database_unavailable", "describe",
]

UnfixableReason = Literal["unstorable-text", "out-of-range", "too-large", "invalid-data"]

_MAX_CHAIN = 8

_TOO_LARGE = (MessageSizeTooLargeError, RecordTooLargeError, RecordListTooLargeError)

_SQLSTATES: dict[str, UnfixableReason] = {
    "22021": "unstorable-text",
    "22P05": "unstorable-text",
    "22003": "out-of-range",
    "22008": "out-of-range",
}


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and what it wraps (``orig`` of a DBAPI error, then ``__cause__``), bounded."""
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and len(seen) < _MAX_CHAIN and current not in seen:
        seen.append(current)
        wrapped = getattr(current, "orig", None)
        current = wrapped if isinstance(wrapped, BaseException) else current.__cause__
    return seen


def _sqlstate(error: BaseException) -> str:
    state = getattr(error, "sqlstate", None)
    return state if isinstance(state, str) else ""


def _specific(error: BaseException) -> UnfixableReason | None:
    """What a link says on its own: a known SQLSTATE, or the codec's or producer's error
    (the driver reports a parameter it could not encode as a generic 22000 around it)."""
    if _sqlstate(error) in _SQLSTATES:
        return _SQLSTATES[_sqlstate(error)]
    if isinstance(error, _TOO_LARGE):
        return "too-large"
    if isinstance(error, UnicodeError):
        return "unstorable-text"
    if isinstance(error, OverflowError):
        return "out-of-range"
    return None


def _general(error: BaseException) -> UnfixableReason | None:
    """What a link's class says when no link said more."""
    state = _sqlstate(error)
    if state.startswith("22"):
        return "invalid-data"
    if state.startswith("54"):
        return "too-large"
    if isinstance(error, ValueError | RecursionError):
        return "invalid-data"
    return None


def cannot_succeed(error: BaseException) -> UnfixableReason | None:
    """The reason code when no retry can make ``error`` go away, else None."""
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return None
    chain = _chain(error)
    for judge in (_specific, _general):
        for link in chain:
            reason = judge(link)
            if reason is not None:
                return reason
    return None


_UNAVAILABLE_SQLSTATES = frozenset({"25006", "57P01", "57P02", "57P03", "57P04", "57P05"})
_UNAVAILABLE_CLASSES = ("08", "40", "53", "58", "XX")
_CLIENT_OUTAGES = (
    ProtocolError,
    OutdatedSchemaCacheError,
    TargetServerAttributeNotMatched,
    ConnectionError,
    TimeoutError,
)


def database_unavailable(error: BaseException) -> bool:
    """True when ``error`` says the database, or the connection to it, failed for now (the
    SQLSTATEs and client errors in the module docstring): an outage to wait out, never a
    reason to give a record up."""
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return True
    for link in _chain(error):
        state = _sqlstate(link)
        if state in _UNAVAILABLE_SQLSTATES or state.startswith(_UNAVAILABLE_CLASSES):
            return True
        if type(link) is AsyncpgInterfaceError or isinstance(link, _CLIENT_OUTAGES):
            return True
    return False


def database_read_only(error: BaseException) -> bool:
    """True when ``error`` is the database refusing a write as read-only (SQLSTATE 25006)."""
    return any(_sqlstate(link) == "25006" for link in _chain(error))


def describe(error: BaseException) -> str:
    """A detail for logs and DLQ headers: error types and SQLSTATE, never the error's text
    (drivers quote the offending value in their messages)."""
    parts: list[str] = []
    for link in _chain(error):
        name = type(link).__name__
        state = getattr(link, "sqlstate", None)
        part = f"{name} (SQLSTATE {state})" if isinstance(state, str) else name
        if part not in parts:
            parts.append(part)
    return " <- ".join(parts)[:300]
