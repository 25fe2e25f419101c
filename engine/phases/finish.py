"""Phase 8, Return: the ``TurnResult``.

``changed`` is false when the input was ignored (a repeated id, a wake with no session, a wake
nothing waits for) or when the session came back identical with no message, no wake, no
outcome and no skip to show for the turn. ``version`` is left as it came: the store bumps it.
"""

from __future__ import annotations

from engine.lifecycle import turn as lifecycle_turn
from engine.request import TurnResult
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
    return TurnResult(
        session=session,
        changed=changed,
        messages=state.messages,
        schedule=state.schedule,
        outcomes=state.outcomes,
        started=state.started,
        ended=state.ended,
        skipped=state.skipped,
        llm_calls=state.llm_calls,
        **extras,
    )
