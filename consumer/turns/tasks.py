"""The service's side tasks, and what the crash of one of its tasks logs.

Side tasks are the work a fetch or an assignment starts and does not wait for: a refused
record's way to the DLQ, a new partition's start position, the pruning of old per-minute
budgets. They are kept so that the shutdown can cancel them before it closes the store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable
from typing import Any

__all__ = ["SideTasks", "cancel_tasks", "log_crash"]

log = logging.getLogger("turnflow.consumer")


def log_crash(task: asyncio.Task[None]) -> None:
    """A worker that died of a bug holds its partition's commit back (the lag shows it)."""
    if not task.cancelled() and task.exception() is not None:
        log.error(
            "session worker crashed; its input stays uncommitted until the partition moves",
            extra={"error": type(task.exception()).__name__},
        )


async def cancel_tasks(tasks: Iterable[asyncio.Task[None]]) -> None:
    """Cancel ``tasks`` and wait until each has ended."""
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)


class SideTasks:
    """Tasks started and not awaited, each kept until it ends."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        task.add_done_callback(log_crash)
