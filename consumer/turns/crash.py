"""A hard exit at a named point of an input's path, for the fault tests (``tests/faults``).

``TURNFLOW_CRASH_AT=<point>`` (or ``<point>:<n>``, the n-th time the point is reached; 1 when
omitted) makes the process call ``os._exit`` there: no ``finally``, no flush, no offset commit,
no group leave — what a kill or a power cut leaves behind. The points, in an input's order:

- ``after_load``: the session and history are loaded, the turn has not run;
- ``after_turn``: the turn ran, nothing is saved;
- ``after_save``: the save transaction committed, nothing is published;
- ``after_publish``: the outbox rows are acked and marked, the offset is not released;
- ``before_commit``: offsets are about to be committed to the group.

The variable is read once, at import. When it is unset ``reached`` is a function that returns
at once, so production pays one call per point and nothing else.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

__all__ = ["CRASH_EXIT_CODE", "CRASH_POINTS", "CrashPlan", "parse_plan", "reached"]

CRASH_POINTS = ("after_load", "after_turn", "after_save", "after_publish", "before_commit")

# Distinct from 0 (clean stop), 1 (unreachable server) and 2 (bad configuration), so a test
# tells a planned crash from any other exit.
CRASH_EXIT_CODE = 70


class CrashPlan:
    """Exit hard the ``nth`` time ``point`` is reached."""

    def __init__(self, point: str, nth: int = 1) -> None:
        if point not in CRASH_POINTS:
            raise ValueError(f"TURNFLOW_CRASH_AT: unknown point {point!r}")
        if nth < 1:
            raise ValueError("TURNFLOW_CRASH_AT: the count must be at least 1")
        self.point = point
        self.remaining = nth

    def reached(self, point: str) -> None:
        if point != self.point:
            return
        self.remaining -= 1
        if self.remaining <= 0:
            # One line so the test log says where it stopped; stderr is unbuffered.
            print(f"turnflow: crash at {point} (TURNFLOW_CRASH_AT)", file=sys.stderr)
            os._exit(CRASH_EXIT_CODE)


def parse_plan(value: str | None) -> CrashPlan | None:
    """``"after_save"`` or ``"after_save:3"`` as a plan; None for an unset or empty value."""
    if not value:
        return None
    point, _, count = value.strip().partition(":")
    return CrashPlan(point, int(count) if count else 1)


def _never(point: str) -> None:
    """No crash planned."""


_PLAN = parse_plan(os.environ.get("TURNFLOW_CRASH_AT"))

reached: Callable[[str], None] = _PLAN.reached if _PLAN is not None else _never
