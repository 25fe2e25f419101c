"""Handing the conversation to a human, and the silence that follows until the host clears it.

A hand-off comes from a rule (checked in Ingest, before any model call: see
``handoff_rules``) or from the speak call's ``handoff`` tool (applied in Settle). Either way:
every live run ends (reason ``handoff``), one message of kind ``handoff`` carries the
``HandoffNotice`` (reason, summary, tag) for the host, and the session is marked handed off.
From then on every input is only recorded (its id, the customer's time) and answered with the
outcome ``handed-off``: no model call, no run, no message, no timer. The host ends the hand-off
with the event named by ``handoff.clear_event`` (default ``handoff_cleared``); that event then
runs like any other, and the turn and fallback counts start again from zero.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.lifecycle import plan
from engine.lifecycle import turn as lifecycle_turn
from engine.lifecycle.handoff_rules import rule_fired
from engine.lifecycle.results import HandoffNotice
from engine.lifecycle.settings import PLAN_GATED
from engine.request import Message
from engine.values import ms

if TYPE_CHECKING:
    from engine.state import TurnState


def on_input(state: TurnState) -> None:
    """Ingest: keep a handed-off session silent, clear it, or let a rule hand it off."""
    turn = lifecycle_turn.of(state)
    if turn is None:
        return
    rules = turn.settings.handoff_rules
    request = state.request
    if turn.memory.handoff is not None:
        if request.kind == "event" and request.event == rules.clear_event:
            turn.memory.handoff = None
            turn.memory.turns = 0
            turn.memory.consecutive_fallbacks = 0
            state.outcome("handed-back", detail=request.event)
            return
        if request.kind == "message":
            state.session.last_user_at = request.at or state.now
        state.outcome("handed-off", detail=str(turn.memory.handoff.get("reason")))
        state.done = True
        return
    if gate_plan(state, turn):
        return
    if request.kind != "message" or request.message is None:
        return
    notice = rule_fired(rules, request.text or request.message, turn.memory)
    if notice is None:
        turn.memory.turns += 1
        return
    state.session.last_user_at = request.at or state.now
    local = request.id or str(ms(request.at or state.now))
    hand_over(state, notice, key=state.session_key("handoff", local))
    state.done = True


def hand_over(
    state: TurnState, notice: HandoffNotice, *, key: str, text: str | None = None
) -> None:
    """End every run, send the hand-off message, and silence the session."""
    turn = lifecycle_turn.of(state)
    assert turn is not None
    turn.handoff = notice
    turn.memory.handoff = {**notice.model_dump(mode="json"), "at": state.now.isoformat()}
    for run in list(state.session.runs):
        state.end_run(run, "handoff")
    body = text if text is not None else turn.settings.handoff_rules.message
    state.messages.append(Message(kind="handoff", text=body, key=key, handoff=notice))
    state.outcome("handoff", detail=notice.reason)


def settle_requested(state: TurnState) -> bool:
    """Settle: apply a hand-off the speak call asked for; True when it did (nothing else moves).

    The model's own words from that call, if any, go with the hand-off instead of the
    configured message.
    """
    turn = state.lifecycle if state.config.lifecycle is not None else None
    if turn is None or turn.handoff_requested is None:
        return False
    speaker = state.speaker
    run = state.live(speaker.run_id) if speaker is not None and speaker.run_id else None
    reply_key = f"{run.id}:{run.step_id}:{run.visit}" if run else (state.request.id or "idle")
    calls = state.reply.calls if state.reply is not None else 0
    state.outcome("handoff-requested", run, detail=turn.handoff_requested.reason,
                  llm_calls=calls)
    hand_over(state, turn.handoff_requested,
              key=state.session_key("handoff", reply_key),
              text=turn.partial_text)
    return True


def gate_plan(state: TurnState, turn: lifecycle_turn.LifecycleTurn) -> bool:
    """Ingest: end a turn the plan check gated (``engine.lifecycle.plan``) here: hand-off with
    ``plan_gated``, or silence; True if gated."""
    if not turn.gated:
        return False
    request = state.request
    if request.kind == "message":
        state.session.last_user_at = request.at or state.now
    state.outcome(plan.GATED, detail="the plan does not include the agent")
    if turn.settings.escalation and request.kind != "wake":
        notice = HandoffNotice(
            reason=PLAN_GATED,
            summary="The workspace's plan does not include the agent.",
            tag=turn.settings.handoff_rules.tag,
        )
        local = request.input_id or str(ms(request.at or state.now))
        hand_over(state, notice, key=state.session_key("handoff", local))
    state.done = True
    return True
