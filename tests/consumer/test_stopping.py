"""``stopped_within``: a wait that a stop cuts short."""

from __future__ import annotations

import asyncio

from consumer.stopping import stopped_within


async def test_the_wait_runs_out_unless_stopped() -> None:
    stop = asyncio.Event()
    assert await stopped_within(stop, 0.01) is False


async def test_a_stop_before_or_during_the_wait_ends_it_at_once() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.call_later(0.05, stop.set)
    started = loop.time()
    assert await stopped_within(stop, 30) is True
    assert loop.time() - started < 5
    assert await stopped_within(stop, 30) is True  # already set: no wait
