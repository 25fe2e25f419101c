"""The event loop `consume`, `schedule` and `relay` run on: uvloop where installed, else asyncio's.

A turn is a chain of small awaits (load, model call, save, publish, mark), and part of the
consumer's CPU per turn is the loop's own work: futures, callbacks, socket reads and writes.
uvloop does that work in C on libuv and is a drop-in asyncio loop; the end-to-end benchmark
measures what it saves per turn (bench/README.md). ``EVENT_LOOP=asyncio`` runs on asyncio's own
loop instead, to rule the loop out when chasing a problem; ``EVENT_LOOP=uvloop`` insists on
uvloop and fails at start when it is missing (it has no Windows build).
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable
from typing import Literal

__all__ = [
    "EventLoopChoice", "EventLoopUnavailable", "loop_factory", "loop_name", "running_loop_name",
]

EventLoopChoice = Literal["auto", "uvloop", "asyncio"]


class EventLoopUnavailable(RuntimeError):
    """``EVENT_LOOP=uvloop`` on a machine without uvloop."""


def loop_name(choice: EventLoopChoice) -> str:
    """The loop ``choice`` runs on here: ``uvloop`` or ``asyncio``."""
    if choice == "asyncio":
        return "asyncio"
    if importlib.util.find_spec("uvloop") is not None:
        return "uvloop"
    if choice == "uvloop":
        raise EventLoopUnavailable(
            "EVENT_LOOP=uvloop but uvloop is not installed (pip install uvloop, or set "
            "EVENT_LOOP=auto)"
        )
    return "asyncio"


def loop_factory(choice: EventLoopChoice) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What ``asyncio.Runner(loop_factory=...)`` takes for ``choice``; None is asyncio's own."""
    if loop_name(choice) == "asyncio":
        return None
    import uvloop

    new_loop: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return new_loop


def running_loop_name() -> str:
    """The running loop's package (``uvloop`` or ``asyncio``), for the ready log line."""
    return type(asyncio.get_running_loop()).__module__.split(".")[0]
