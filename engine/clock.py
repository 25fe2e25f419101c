"""Where the engine's time comes from.

Core code never reads the system clock: every phase gets ``now`` from the agent's clock, so a
test passes a ``FakeClock`` and moves it by hand, and a replay sees the time it was given.
All times are timezone-aware UTC ``datetime`` values.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Anything with ``now() -> datetime`` (aware, UTC)."""

    def now(self) -> datetime: ...


def to_utc(value: datetime | str) -> datetime:
    """Parse an ISO string or normalise a datetime to aware UTC (naive means UTC).

    Raises ``ValueError`` for text that is not an ISO 8601 time and for a time that leaves
    years 1-9999 once moved to UTC (``9999-12-31T23:00:00-05:00``). The message never quotes
    the text: it may be a customer's, and errors travel to logs and dead letters.
    """
    if type(value) is datetime:
        if value.tzinfo is UTC:  # the common case: a time this module already normalised
            return value
    elif isinstance(value, str):
        text = value
        try:
            # Python 3.11 reads a trailing "Z" itself; the rewrite is the fallback that keeps
            # exactly the strings accepted before.
            value = datetime.fromisoformat(text)
        except ValueError:
            try:
                value = datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError("not an ISO 8601 time") from None
        if value.tzinfo is UTC:
            return value
    elif not isinstance(value, datetime):
        raise ValueError("expected an ISO 8601 string or a datetime")
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("time out of range once moved to UTC") from None


class SystemClock:
    """The default clock: the host's wall time, read only here."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class FakeClock:
    """A clock that moves only when told to; for tests and replays."""

    def __init__(self, start: datetime | str = "2026-01-05T09:00:00Z") -> None:
        self._now = to_utc(start)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float = 0, *, ms: int = 0, minutes: float = 0) -> datetime:
        self._now += timedelta(seconds=seconds, milliseconds=ms, minutes=minutes)
        return self._now

    def set(self, value: datetime | str) -> datetime:
        self._now = to_utc(value)
        return self._now

    def __repr__(self) -> str:
        return f"FakeClock({self._now.isoformat()!r})"
