"""Phase 1, Load: the clock, a deep copy of the session (or a fresh one), trimmed history.

The session passed in is never touched again: every later phase writes the copy. A wake with
no session does nothing (``no-session``). Compaction's code layers run here; its one model
call, when needed, runs right before the turn's first model call (see ``compaction.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.clock import to_utc
from engine.compaction import trim
from engine.request import TurnRequest
from engine.session import fresh_session
from engine.state import TurnState

if TYPE_CHECKING:
    from engine.agent import AgentConfig


async def run(config: AgentConfig, request: TurnRequest) -> TurnState:
    """Build the turn's working state."""
    now = to_utc(config.clock.now())
    if request.session is not None:
        original = request.session.model_dump(mode="json")
        session = request.session.model_copy(deep=True)
    else:
        session = fresh_session(request.session_id)
        original = session.model_dump(mode="json")
    history = [entry.model_copy() for entry in request.history]
    state = TurnState(
        config=config,
        request=request,
        now=now,
        session=session,
        original=original,
        history=history,
    )
    if request.kind == "wake" and request.session is None:
        state.outcome("no-session", detail=request.wake)
        state.ignored = state.done = True
        return state
    if config.compaction is not None:
        trim(state)
    return state
