"""A message the host answers without the model: recorded, and answered with the fallback.

When the model could not be reached for longer than the host holds a conversation, the host
runs the message again with ``fallback`` set rather than dropping it. Such a turn still takes
the message's ids (a replay of the same record is a duplicate) and ``last_user_at`` (Ingest),
then makes no model call and moves no flow: the conversation stands where it stood, so the
customer's next message is read as this one would have been. It sends the agent's
``fallback_message`` (a lifecycle setting; the turn outcome ``fallback``), else the host's
``fallback.message``. Settle then does its bookkeeping (``last_assistant_at``, silence wakes).
Under ``silenced`` nobody speaks, this turn included.

With ``end_runs`` the host says the conversation's runs cannot continue (the agent version they
started on was deleted, or no longer builds): each run ends with the outcome ``version-gone``
(its flow and step in the outcome line) before the fallback message, so the customer's answer,
a confirmation or a timer's wake gets the fallback rather than silence, and the next input
starts afresh on the version that can run.
"""

from __future__ import annotations

from engine.lifecycle import turn as lifecycle_turn
from engine.state import TurnState
from engine.values import ms


def run(state: TurnState) -> None:
    """Send the fallback message for the message the model could not read."""
    request = state.request
    given = request.fallback
    if state.done or given is None:
        return
    if given.end_runs:
        for gone in list(state.session.runs):
            state.end_run(gone, "version-gone", detail=f"{gone.flow_id}/{gone.step_id}")
    state.outcome("fallback", step_id="fallback", detail=given.reason)
    if request.silenced is not None:
        return
    turn = lifecycle_turn.of(state)
    own = turn.settings.fallback_message if turn is not None else None
    local = request.input_id or str(ms(request.at or state.now))
    state.send(None, "ai", own or given.message, state.session_key("fallback", local),
               None)
    if turn is not None:
        turn.fallback = True
