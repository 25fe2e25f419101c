"""Phase 1, Load: the clock, a deep copy of the session (or a fresh one), trimmed history.

The session passed in is never touched again: every later phase writes the copy. A wake with
no session does nothing (``no-session``). An input's ``at`` later than the clock is read as
now: an input cannot have happened after the turn that takes it, and a customer's last word
dated in the future (a skewed host clock, or year 9999) would outlast every later reply and keep
silence triggers from ever arming again. Compaction's code layers run here; its one model
call, when needed, runs right before the turn's first model call (see ``compaction.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.clock import to_utc
from engine.compaction import trim
from engine.request import TurnRequest
from engine.session import Session, fresh_session
from engine.state import TurnState

if TYPE_CHECKING:
    from engine.agent import AgentConfig


async def run(config: AgentConfig, request: TurnRequest) -> TurnState:
    """Build the turn's working state."""
    now = to_utc(config.clock.now())
    if request.at is not None and request.at > now:
        request = request.model_copy(update={"at": now})
    if request.session is not None:
        original = request.session
        # A dump/validate round trip through pydantic-core is the deep copy: every container
        # is rebuilt, and it costs a fraction of copy.deepcopy on a large session.
        session = Session.model_validate(request.session.model_dump())
    else:
        original = fresh_session(request.session_id)
        session = fresh_session(request.session_id)
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
