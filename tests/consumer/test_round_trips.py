"""Readiness from recent round trips: up only while every probe's last answer was a success
that is still fresh."""

from __future__ import annotations

import asyncio

from consumer.round_trips import RoundTrips


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def _ok() -> None:
    return None


async def _down() -> None:
    raise ConnectionRefusedError("no broker")


async def _hangs() -> None:
    await asyncio.sleep(60)


def test_fresh_needs_every_probe_up_and_recent() -> None:
    """Not ready before any answer; ready after both answered; not after one failed; not when
    the last success is older than fresh_s."""
    clock = Clock()
    trips = RoundTrips({"broker": _ok, "database": _ok}, fresh_s=10, clock=clock)
    assert not trips.fresh()
    trips.record("broker", True)
    assert not trips.fresh()
    trips.record("database", True)
    assert trips.fresh()
    trips.record("broker", False)
    assert not trips.fresh()
    trips.record("broker", True)
    clock.now += 10.5
    trips.record("database", True)
    assert not trips.fresh()  # the broker's success is 10.5 s old


async def test_a_failing_or_hanging_probe_makes_it_not_ready() -> None:
    """check_once runs the probes: a refused connection and a probe past its timeout both count
    as down, and a later success brings readiness back."""
    probes = {"broker": _down, "database": _ok}
    trips = RoundTrips(probes, timeout_s=0.05)
    await trips.check_once()
    assert not trips.fresh()
    probes["broker"] = _hangs
    trips = RoundTrips(probes, timeout_s=0.05)
    await trips.check_once()
    assert not trips.fresh()
    trips = RoundTrips({"broker": _ok, "database": _ok}, timeout_s=0.05)
    await trips.check_once()
    assert trips.fresh()


async def test_the_background_loop_follows_an_outage() -> None:
    """Started, the loop notices a probe going down and coming back within an interval."""
    state = {"up": True}

    async def broker() -> None:
        if not state["up"]:
            raise ConnectionRefusedError

    trips = RoundTrips({"broker": broker}, interval_s=0.01, timeout_s=0.5)
    trips.start()
    try:
        await asyncio.sleep(0.05)
        assert trips.fresh()
        state["up"] = False
        await asyncio.sleep(0.05)
        assert not trips.fresh()
        state["up"] = True
        await asyncio.sleep(0.05)
        assert trips.fresh()
    finally:
        await trips.stop()
