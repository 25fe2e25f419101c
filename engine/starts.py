"""The start checks: may this flow start a run now?

One function for every way a run starts (message routing, mentions, events, silence, host
starts), so ``repeat``, cooldowns, claims and conditions mean the same everywhere.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from engine.config import Cooldown, Flow
from engine.state import TurnState


def blocked(
    state: TurnState,
    flow: Flow,
    trigger_if: Any = None,
    *,
    input: dict[str, Any] | None = None,
    allow_live: bool = False,
) -> str | None:
    """The skip code that blocks a start, or None when the flow may start.

    Codes: ``if-false`` (the trigger's ``if``), ``when-false`` (the flow's ``when``),
    ``repeat-once`` (a ``once`` flow already ran here), ``cooldown``, ``already-running``.
    """
    if not state.holds(trigger_if, input=input or {}):
        return "if-false"
    if not state.holds(flow.when, input=input or {}):
        return "when-false"
    repeat_code = repeat_blocked(state, flow)
    if repeat_code:
        return repeat_code
    if not allow_live and any(r.flow_id == flow.id for r in state.session.runs):
        return "already-running"
    return None


def repeat_blocked(state: TurnState, flow: Flow) -> str | None:
    """``repeat-once`` or ``cooldown`` when the flow's claim blocks a new start."""
    claim = state.session.claims.get(f"flow:{flow.id}")
    if claim is None or flow.repeat == "always":
        return None
    if flow.repeat == "once":
        return "repeat-once"
    assert isinstance(flow.repeat, Cooldown)
    if state.now < claim.at + timedelta(milliseconds=flow.repeat.cooldown_ms):
        return "cooldown"
    return None
