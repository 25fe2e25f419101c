"""Phase 8, Return: the ``TurnResult``.

``changed`` is false when the input was ignored (a repeated id, a wake with no session, a wake
nothing waits for) or when the session came back identical with no message, no wake, no
outcome and no skip to show for the turn. ``version`` is left as it came: the store bumps it.
"""

from __future__ import annotations

from typing import Any

from engine.lifecycle import turn as lifecycle_turn
from engine.records import record
from engine.request import Message, Outcome, RunChange, ScheduleEntry, Skip, TurnResult
from engine.session import Session
from engine.state import TurnState


def run(state: TurnState) -> TurnResult:
    """Assemble the result from the turn's state."""
    extras = lifecycle_turn.close(state)  # before the comparison: it may write metadata
    session = state.session
    if state.ignored:
        changed = False
    elif state.messages or state.schedule or state.outcomes or state.skipped:
        changed = True
    else:  # only now is the pre-turn session needed (and, for some inputs, built)
        changed = session != state.original()
    given = {
        "session": session,
        "changed": changed,
        "messages": state.messages,
        "schedule": state.schedule,
        "outcomes": state.outcomes,
        "started": state.started,
        "ended": state.ended,
        "skipped": state.skipped,
        "llm_calls": state.llm_calls,
    }
    if extras:  # a lifecycle agent's fields: validated as given
        return TurnResult(**given, **extras)
    return _result(given)


_RESULT_LISTS: tuple[tuple[str, type[Any]], ...] = (
    ("messages", Message),
    ("schedule", ScheduleEntry),
    ("outcomes", Outcome),
    ("started", RunChange),
    ("ended", RunChange),
    ("skipped", Skip),
)


def _result(given: dict[str, Any]) -> TurnResult:
    """``TurnResult(**given)`` for the engine's own result, built as ``engine.records`` builds a
    turn's own records. Validation would pass the session and every record in the lists
    through as they are (pydantic does not validate a model instance again) and make each list
    a new list of the same items, which is what this does; anything else (a session or an
    item of another type, which validation would convert or refuse) takes the validated
    construction."""
    if (
        type(given["session"]) is not Session
        or type(given["changed"]) is not bool
        or type(given["llm_calls"]) is not int
    ):
        return TurnResult(**given)
    values = dict(given)
    for name, kind in _RESULT_LISTS:
        items = values[name] = list(values[name])
        for item in items:
            if type(item) is not kind:
                return TurnResult(**given)
    values |= {
        "turn_outcome": None,
        "link_fixes": [],
        "task_result": None,
        "goal_result": None,
        "credits": None,
    }
    return record(TurnResult, values, set(given))
