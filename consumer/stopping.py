"""Waiting that a stop cuts short: the back-offs and pauses of the consumer, the relay, the
schedule intake and the supervisor all wait a while unless the process is asked to stop."""

from __future__ import annotations

import asyncio

__all__ = ["stopped_within"]


async def stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds`` or until ``stop`` is set, whichever comes first; whether it was set
    (at once when it already is)."""
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        return False
    return True
