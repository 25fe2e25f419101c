"""What ``turnflow inspect`` and ``turnflow ui`` share: where to read from, and the time
arguments (``--since 2h`` or an ISO 8601 time), parsed the same for the CLI and the pages."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta

from store.pooler import POOLER_MODES, Pooler

__all__ = [
    "TRACE_URL_VARIABLE", "database_pooler", "database_url", "parse_time", "trace_link",
    "trace_url",
]

TRACE_URL_VARIABLE = "TURNFLOW_TRACE_URL"
"""Names a trace UI's page for one trace, ``{trace_id}`` marking where its id goes."""

_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")

_RELATIVE = re.compile(r"^\s*(\d{1,6})\s*([smhd])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def database_url() -> str | None:
    """``INSPECT_DATABASE_URL`` (a read-only role's, see docs/inspecting.md), else
    ``DATABASE_URL``; None when neither is set."""
    for name in ("INSPECT_DATABASE_URL", "DATABASE_URL"):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def database_pooler() -> Pooler:
    """``DATABASE_POOLER`` (store/pooler.py): ``transaction`` when the URL reaches PostgreSQL
    through a transaction-mode pooler, else ``none``. A ValueError names a value that is
    neither."""
    value = os.environ.get("DATABASE_POOLER", "").strip().lower() or "none"
    for mode in POOLER_MODES:
        if value == mode:
            return mode
    raise ValueError(f"DATABASE_POOLER must be one of {', '.join(POOLER_MODES)}, not {value!r}")


def trace_url() -> str | None:
    """``TURNFLOW_TRACE_URL``: an http(s) URL holding ``{trace_id}`` (say
    ``http://localhost:6006/projects/default/traces/{trace_id}``), the page of one trace in
    the trace UI the turns are exported to; None when unset. A ValueError says what is wrong
    with a value that cannot be used."""
    value = os.environ.get(TRACE_URL_VARIABLE, "").strip()
    if not value:
        return None
    if "{trace_id}" not in value:
        raise ValueError(f"{TRACE_URL_VARIABLE} must hold {{trace_id}} where a trace's id goes")
    if not value.lower().startswith(("http://", "https://")):
        raise ValueError(f"{TRACE_URL_VARIABLE} must be an http:// or https:// URL")
    return value


def trace_link(template: str | None, trace_id: str | None) -> str | None:
    """The trace UI's page for ``trace_id`` (``template`` from ``trace_url``); None without a
    template or without a well-formed trace id (32 lowercase hex digits, as stored)."""
    if template is None or trace_id is None or not _TRACE_ID.match(trace_id):
        return None
    return template.replace("{trace_id}", trace_id)


def parse_time(value: str, *, now: datetime | None = None) -> datetime:
    """``30m``, ``2h``, ``7d`` (that long ago) or an ISO 8601 time (UTC when it names no zone).
    A ValueError names what is accepted."""
    match = _RELATIVE.match(value)
    if match:
        amount, unit = int(match.group(1)), match.group(2)
        try:
            return (now or datetime.now(UTC)) - timedelta(**{_UNITS[unit]: amount})
        except OverflowError:
            raise ValueError(f"{value.strip()} ago is before the year 1") from None
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(
            "not a time: give an ISO 8601 time (2026-12-03T08:00) or an age (30m, 2h, 7d)"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
