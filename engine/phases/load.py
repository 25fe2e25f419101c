"""Phase 1, Load: the clock, a deep copy of the session (or a fresh one), trimmed history.

The session passed in is never touched again: every later phase writes the copy. A session
that came as a dict inside a dict request was validated into a ``Session`` nobody else holds,
so that one becomes the turn's session (its ``Any`` values rebuilt, which validation shares
with the caller's dict) instead of being copied again. A wake with
no session does nothing (``no-session``). An input's ``at`` later than the clock is read as
now: an input cannot have happened after the turn that takes it, and a customer's last word
dated in the future (a skewed host clock, or year 9999) would outlast every later reply and keep
silence triggers from ever arming again; so are a stored session's ``last_user_at`` and
``last_assistant_at`` (a silence wake is set from the latter, and from year 9999 it would
overflow on every turn). Compaction's code layers run here; its one model
call, when needed, runs right before the turn's first model call (see ``compaction.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from engine.clock import to_utc
from engine.compaction import trim
from engine.records import copy_record
from engine.request import TurnRequest
from engine.session import Session, copy_session, detach_values, fresh_session, migrate_session
from engine.state import TurnState

if TYPE_CHECKING:
    from engine.agent_config import AgentConfig


async def run(
    config: AgentConfig,
    request: TurnRequest,
    stored: dict[str, Any] | None = None,
    *,
    history_owned: bool = False,
) -> TurnState:
    """Build the turn's working state.

    ``stored`` is the caller's session dict when ``request.session`` was validated from it for
    this turn alone (``Agent.turn`` given a dict); the turn then writes ``request.session``
    itself and reads the pre-turn session back from ``stored`` only if ``changed`` needs it.
    ``history_owned`` says the same of the history entries (validated from dicts for this turn
    alone): the turn then keeps them instead of copying each one, as the session's.
    """
    now = to_utc(config.clock.now())
    if request.at is not None and request.at > now:
        request = request.model_copy(update={"at": now})
    original: Callable[[], Session]
    if request.session is None:
        session = fresh_session(request.session_id)
        original = partial(fresh_session, request.session_id)
    elif stored is not None:
        session = request.session
        detach_values(session)
        original = partial(migrate_session, stored)
    else:
        # copy_session rebuilds what a dump/validate round trip would, without validating.
        caller = request.session
        session = copy_session(caller)
        original = partial(_same, caller)
    # A stored time later than the clock is read as now, like an input's ``at``: a session
    # saying the assistant last spoke in year 9999 would otherwise overflow the silence wake
    # set from it, on every turn.
    if session.last_user_at is not None and session.last_user_at > now:
        session.last_user_at = now
    if session.last_assistant_at is not None and session.last_assistant_at > now:
        session.last_assistant_at = now
    if history_owned:
        history = list(request.history)
    else:
        history = [copy_record(entry) for entry in request.history]
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


def _same(session: Session) -> Session:
    return session
