"""Phase 2, Ingest: what the input itself means, before anything is judged.

Message: replays dropped (each message of a burst on its own), ``last_user_at`` set from the
last, timer waits with an ``else`` take it.
Wake: a silence wake starts its flow while the silence still holds; any other key belongs to
the one run waiting on it. Event: inbound counts as the customer, outbound as the assistant;
event waits take ``then``; event triggers start (or park, with ``after_ms``). Start: the host
starts a flow. A run that takes or resumes the floor here makes Decide skip routing.
"""

from __future__ import annotations

from datetime import timedelta

from engine.config import EventTrigger, SilenceTrigger, WaitStep
from engine.keys import burst_lineage, silence_key
from engine.lifecycle import handoff
from engine.moves import take
from engine.session import INPUT_RING, Run
from engine.starts import blocked
from engine.state import TurnState
from engine.values import ms


def run(state: TurnState) -> None:
    """Apply the input to the session copy."""
    if state.done:
        return
    request = state.request
    if request.burst:
        _new_lineage(state)
        _burst_ids(state)
        if state.done:
            return
        request = state.request
    elif request.input_id is not None:
        input_id = request.input_id
        if input_id in state.session.inputs:
            state.outcome("duplicate-input", detail=input_id)
            state.ignored = state.done = True
            return
        state.session.inputs = [*state.session.inputs, input_id][-INPUT_RING:]
    if request.fallback is not None:  # the host answers it without the model: nothing moves
        if request.kind == "message":
            state.session.last_user_at = request.at or state.now
        return
    handoff.on_input(state)  # lifecycle: hand-off rules and the silence after a hand-off
    if state.done:
        return
    if request.kind == "message":
        state.session.last_user_at = request.at or state.now
        _customer_replied(state)
    elif request.kind == "wake":
        _wake(state)
    elif request.kind == "event":
        _event(state)
    else:
        _start(state)


def _new_lineage(state: TurnState) -> None:
    """A burst turn starts a lineage of its own (``engine.keys``): a re-run that groups these
    messages otherwise mints other keys from here on, so no key names two contents."""
    request, session = state.request, state.session
    parts = [
        (p.id, p.at.isoformat() if p.at is not None else None, p.message)
        for p in request.parts
    ]
    session.metadata["lineage"] = burst_lineage(state.lineage, session.version, parts)


def _burst_ids(state: TurnState) -> None:
    """Record every id of a burst; the messages the session already had (or that repeat an
    earlier one of the burst) are dropped from the turn, and a burst of nothing but such
    messages is a duplicate."""
    request = state.request
    seen = set(state.session.inputs)
    fresh = []
    for part in request.parts:
        if part.id is not None and part.id in seen:
            continue
        if part.id is not None:
            seen.add(part.id)
        fresh.append(part)
    if not fresh:
        state.outcome("duplicate-input", detail=request.parts[-1].id)
        state.ignored = state.done = True
        return
    if len(fresh) < len(request.parts):
        state.request = request.only(fresh)
    ids = [p.id for p in fresh if p.id is not None]
    state.session.inputs = [*state.session.inputs, *ids][-INPUT_RING:]


def _take_floor(state: TurnState, run: Run) -> None:
    state.floor_taken = True
    state.floor_run_id = run.id


def _customer_replied(state: TurnState) -> None:
    """Every run parked on a timer wait with an ``else`` takes it, in start order."""
    if not state.config.waits_with_else:
        return
    for run in list(state.session.runs):
        if run.status != "waiting" or run.waiting is None or run.waiting.kind != "timer":
            continue
        flow = state.flow(run.flow_id)
        step = flow.step(run.step_id) if flow else None
        if not isinstance(step, WaitStep) or step.else_ is None:
            continue
        assert flow is not None
        state.set_status(run, "running")
        run.waiting = None
        state.outcome("replied", run)
        _take_floor(state, run)
        take(state, run, flow, step, step.else_)


def _wake(state: TurnState) -> None:
    key = state.request.wake
    assert key is not None
    silence = silence_key(state.session.id, key)
    if silence is not None:
        _silence_wake(state, key, *silence)
        return
    run = next(
        (r for r in state.session.runs if r.waiting is not None and r.waiting.key == key), None
    )
    if run is None or run.waiting is None:
        state.outcome("stale-wake", detail=key)
        state.ignored = state.done = True
        return
    kind = run.waiting.kind
    state.set_status(run, "running")
    run.waiting = None
    _take_floor(state, run)
    flow = state.flow(run.flow_id)
    step = flow.step(run.step_id) if flow else None
    if flow is None or step is None:
        return  # phase 5 ends it: flow-gone / step-gone
    if kind == "timer" and isinstance(step, WaitStep):
        state.outcome("no-reply", run)
        take(state, run, flow, step, step.then)
    elif kind == "event" and isinstance(step, WaitStep):
        state.outcome("no-event", run)
        take(state, run, flow, step, step.else_)
    elif kind == "defer":
        state.outcome("action-retry", run, detail=state.talk_key(run))
    elif kind == "retry":
        state.outcome("retry", run, detail=key)
        state.retry_run_id = run.id
    else:
        state.outcome("trigger-due", run)


def _silence_wake(state: TurnState, key: str, flow_id: str, stamp: str) -> None:
    session = state.session
    spoke_at = session.last_assistant_at
    still_silent = (
        spoke_at is not None
        and str(ms(spoke_at)) == stamp
        and (session.last_user_at is None or session.last_user_at <= spoke_at)
    )
    if not still_silent:
        state.outcome("stale-wake", detail=key)
        state.ignored = state.done = True
        return
    flow = state.flow(flow_id)
    if flow is None:
        state.skip(flow_id, "flow-gone")
        return
    index = next((i for i, t in enumerate(flow.on) if isinstance(t, SilenceTrigger)), None)
    trigger_if = flow.on[index].if_ if index is not None else None
    code = blocked(state, flow, trigger_if)
    if code:
        state.skip(flow.id, code)
        return
    run = state.new_run(flow, origin="silence", trigger=index, input={}, reason="silence")
    _take_floor(state, run)


def _event(state: TurnState) -> None:
    request = state.request
    name = request.event
    assert name is not None
    at = request.at or state.now
    if request.direction == "inbound":
        state.session.last_user_at = at
        _customer_replied(state)
    else:
        state.session.last_assistant_at = at
    for run in list(state.session.runs):
        waiting = run.waiting
        if run.status != "waiting" or waiting is None or waiting.kind != "event":
            continue
        if waiting.event != name:
            continue
        flow = state.flow(run.flow_id)
        step = flow.step(run.step_id) if flow else None
        state.set_status(run, "running")
        run.waiting = None
        _take_floor(state, run)
        state.outcome("event-arrived", run, detail=name)
        if flow is not None and isinstance(step, WaitStep):
            take(state, run, flow, step, step.then)
    for flow in state.config.flows:
        for index, trigger in enumerate(flow.on):
            if not isinstance(trigger, EventTrigger) or trigger.event != name:
                continue
            code = blocked(state, flow, trigger.if_, input=request.payload)
            if code:
                state.skip(flow.id, code)
                break
            run = state.new_run(
                flow, origin="event", trigger=index, input=request.payload, reason=f"event:{name}"
            )
            if trigger.after_ms:
                at_wake = state.now + timedelta(milliseconds=trigger.after_ms)
                wake_key = f"{state.talk_key(run)}:after:{ms(at_wake)}"
                state.park(run, key=wake_key, kind="trigger", at=at_wake)
                state.outcome("awaiting-trigger", run, detail=f"{trigger.after_ms}ms")
            break


def _start(state: TurnState) -> None:
    start = state.request.start
    assert start is not None
    flow = state.flow(start.flow)
    if flow is None:
        state.skip(start.flow, "flow-gone")
        return
    code = blocked(state, flow, None, input=start.input)
    if code:
        state.skip(flow.id, code)
        return
    state.new_run(
        flow, origin="start", trigger=None, input=start.input, reason=f"start:{start.key}"
    )
