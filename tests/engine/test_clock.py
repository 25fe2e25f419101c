"""FakeClock moves only when told to."""

from datetime import UTC, datetime

from engine import FakeClock


def test_fake_clock_moves_only_by_hand() -> None:
    """A FakeClock returns the same instant until advanced, and advances exactly."""
    clock = FakeClock("2026-01-05T09:00:00Z")
    assert clock.now() == datetime(2026, 1, 5, 9, tzinfo=UTC)
    assert clock.now() == clock.now()
    clock.advance(seconds=90, ms=500)
    assert clock.now() == datetime(2026, 1, 5, 9, 1, 30, 500000, tzinfo=UTC)
