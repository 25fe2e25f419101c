"""What ``turnflow inspect`` and ``turnflow ui`` share: where to read from, and the time
arguments (``--since 2h`` or an ISO 8601 time), parsed the same for the CLI and the pages."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta

__all__ = ["database_url", "parse_time"]

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
