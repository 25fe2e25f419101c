"""The garbage collector's settings for a long-running service process, and its time as a metric.

CPython frees most objects by reference counting; its cycle collector runs besides, by
generation. A full collection visits every object the process tracks, and it runs whenever
enough objects have been promoted into the oldest generation since the last one. A consumer
holds about 90,000 objects from start-up (modules, pydantic schemas, the agent's flows) that
never become garbage, and a backlog keeps each turn's objects alive long enough to be promoted,
so with the interpreter's defaults a full collection came every few hundred turns and took
50-70 ms: about a fifth of the consumer's CPU at 0 ms model latency (bench/README.md, "The
garbage collector"). ``settle`` changes two things, once start-up is done:

- what exists then is collected once and frozen (``gc.freeze``): moved to a permanent
  generation that no later collection visits. It lives as long as the process anyway;
- the youngest generation is collected after ``YOUNG_THRESHOLD`` allocations (net of frees)
  instead of 700. A turn's objects are freed by reference counting, so the young generation
  grows only by what outlives the turns (a few objects a turn): at 50,000 a consumer under load
  collects it once every few thousand turns, 8-16 ms a pass, and the middle generation (every
  tenth young pass; 11-33 ms a pass at 10,000, several a minute) once every tens of thousands.

Cycles are still collected: frozen objects are only those alive at start-up, and everything
allocated later goes through the generations as before.

``GC_SECONDS`` counts the time spent in collections, by generation, in every process that
settles its heap: a share of CPU the other metrics do not show, and pauses every turn in flight
waits out.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from consumer import metrics

YOUNG_THRESHOLD = 50_000
"""Allocations (net of frees) between two collections of the youngest generation."""

_started: list[float] = []
# The young threshold ``settle`` replaced, for ``unsettle`` to put back.
_replaced: list[int] = []
# Each generation's series, looked up once: the callback runs inside a collection, where it
# should only add a number (no label lookup, no lock but the value's own).
_SERIES = {g: metrics.GC_SECONDS.labels(generation=str(g)) for g in range(3)}


def _timed(phase: str, info: dict[str, Any]) -> None:
    """A ``gc.callbacks`` entry: adds each collection's duration to ``GC_SECONDS``."""
    if phase == "start":
        _started.append(time.perf_counter())
    elif _started:
        elapsed = time.perf_counter() - _started.pop()
        series = _SERIES.get(info.get("generation", -1))
        if series is not None:
            series.inc(elapsed)


def settle() -> None:
    """Collect once, freeze what start-up left, collect the young generation less often, and
    time every collection from now on. Idempotent; call it once start-up is done, before work."""
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    if young and young < YOUNG_THRESHOLD:  # 0 means the collector is off: leave it so
        _replaced.append(young)
        gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    if _timed not in gc.callbacks:
        gc.callbacks.append(_timed)


def is_settled() -> bool:
    """Whether ``settle`` ran in this process (and ``unsettle`` not since)."""
    return _timed in gc.callbacks


def unsettle() -> None:
    """Undo ``settle`` (for tests and embedders): unfreeze, the young threshold it replaced,
    no timing."""
    gc.unfreeze()
    young, middle, old = gc.get_threshold()
    if _replaced and young == YOUNG_THRESHOLD:
        gc.set_threshold(_replaced[0], middle, old)
    _replaced.clear()
    while _timed in gc.callbacks:
        gc.callbacks.remove(_timed)
    _started.clear()
