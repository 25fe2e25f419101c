"""Step 1 of a lifecycle turn: the plan check, before any model call and before anything is billed.

The host supplies ``plan_check(session)`` (sync or async): whether the workspace's plan still
includes the agent. It is asked once per customer message and per host start, the two inputs
that begin an answer, and never for a session already handed over (it is silent anyway). When
the plan does not include the agent: no model call, no run starts, nothing is billed, and the
turn outcome is ``gated``. With ``escalation`` on (the setting of its own; hand-off settings or
the ``handoff`` tool do not imply it) the conversation is handed over with
``handoff_reason: "plan_gated"``; otherwise the agent stays silent.

A silence wake is asked about too: it starts a follow-up flow, an AI turn like an answer, so
with the plan off it is gated (outcome ``gated``, silent, never handed over: no customer is
waiting). Other wakes and events are not asked about: they continue what code started (a wait's
timer, a host event), and a dropped wake would strand its run. An exception raised by
the check propagates out of ``turn()``: nothing is saved, and the host retries the input as it
would after any failure of its own code.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from engine.keys import silence_key
from engine.lifecycle.turn import of

if TYPE_CHECKING:
    from engine.state import TurnState

GATED = "gated"


async def check(state: TurnState) -> None:
    """Ask the host's plan check for this input, when it applies; remember the answer."""
    turn = of(state)
    if turn is None:
        return
    plan_check = turn.settings.plan_check
    if plan_check is None or state.ignored:
        return
    if state.request.kind not in ("message", "start") and not _silence_wake(state):
        return
    if turn.memory.handoff is not None:
        return
    answer = plan_check(state.session)
    if inspect.isawaitable(answer):
        answer = await answer
    turn.gated = not bool(answer)


def _silence_wake(state: TurnState) -> bool:
    """True for a wake that starts a silence follow-up (see ``engine.phases.ingest``)."""
    wake = state.request.wake
    return wake is not None and silence_key(state.session.id, wake) is not None
