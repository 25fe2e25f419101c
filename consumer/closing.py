"""Closing Kafka clients at shutdown, whatever state the broker is in.

During a broker outage aiokafka's consumer ``stop()`` cancels its own fetch tasks and awaits
them, and the ``CancelledError`` of those inner tasks leaks out of ``stop()`` as if the caller
had been cancelled. Left alone it aborts the shutdown half way: later clients stay unclosed and
the process exits 1 with a traceback after a clean SIGTERM. ``close_quietly`` tells the two
apart with ``Task.cancelling()``: a cancellation aimed at the caller still propagates.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from aiokafka.errors import KafkaError

__all__ = ["close_quietly"]

log = logging.getLogger("turnflow.shutdown")


async def close_quietly(closing: Awaitable[object], what: str) -> None:
    """Await ``closing`` (a client's ``stop()``); a Kafka error or a cancellation that was not
    aimed at this task is logged and swallowed, so the next client is closed too."""
    try:
        await closing
    except KafkaError as exc:
        log.warning("closing %s failed", what, extra={"error": type(exc).__name__})
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        log.warning("closing %s was interrupted by its own cancelled work", what)
