"""FakeClock moves only when told to."""

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from engine import FakeClock
from engine.clock import to_utc


def test_fake_clock_moves_only_by_hand() -> None:
    """A FakeClock returns the same instant until advanced, and advances exactly."""
    clock = FakeClock("2026-01-05T09:00:00Z")
    assert clock.now() == datetime(2026, 1, 5, 9, tzinfo=UTC)
    assert clock.now() == clock.now()
    clock.advance(seconds=90, ms=500)
    assert clock.now() == datetime(2026, 1, 5, 9, 1, 30, 500000, tzinfo=UTC)


def _reference_to_utc(value: Any) -> datetime:
    """``to_utc`` as it read before its fast paths: every value through the general path."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


@pytest.mark.parametrize(
    "value",
    [
        "2026-01-05T09:00:00Z",
        "2026-01-05T09:00:00.123456Z",
        "2026-01-05T09:00:00+00:00",
        "2026-01-05T09:00:00-03:00",
        "2026-01-05T09:00:00",
        "2026-01-05",
        "2026-01-05 09:00Z",
        "20260105T090000Z",
        datetime(2026, 1, 5, 9, tzinfo=UTC),
        datetime(2026, 1, 5, 9),
        datetime(2026, 1, 5, 9, tzinfo=timezone(timedelta(hours=5))),
        datetime(2026, 1, 5, 9, tzinfo=timezone(timedelta(0))),
    ],
)
def test_to_utc_gives_what_the_general_path_gives(value: Any) -> None:
    """The fast paths (a datetime already in UTC, a string Python reads itself) return the
    same instant, with the same ``UTC`` tzinfo, as parsing and normalising every value."""
    got = to_utc(value)
    want = _reference_to_utc(value)
    assert got == want and got.tzinfo is UTC and want.tzinfo is UTC
    assert got.isoformat() == want.isoformat()


@pytest.mark.parametrize("value", ["", "Z", "tomorrow", "2026-01-05T09:00:00ZZ", "2026-13-01"])
def test_to_utc_refuses_what_it_refused(value: str) -> None:
    with pytest.raises(ValueError, match="not an ISO 8601 time"):
        to_utc(value)
