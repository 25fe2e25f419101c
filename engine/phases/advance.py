"""Phase 5, Run: every live run walks its steps until one stops it.

Waiting and suspended runs stay put; an asking run re-speaks only on a message. Before a run
moves, its premise (the flow's ``when``, else its trigger's ``if``) is re-checked. Say, do, wait
and if steps are code; a talk step makes its run the asker and the turn's one speaker (phase 6
speaks, phase 7 applies the reply). Caps: 50 steps per run per turn, 5 flow hops.
"""

from __future__ import annotations

from datetime import timedelta

from engine.actions import action_context, call_handler, read_result
from engine.collect import maxed, pending
from engine.config import (
    AnyStep,
    DoStep,
    EventWait,
    Flow,
    IfStep,
    SayStep,
    TalkStep,
    TimerWait,
    WaitStep,
)
from engine.moves import scopes, take
from engine.session import Run, WaitKind
from engine.state import Speaker, TurnState
from engine.values import ms, next_open, render, render_value

STEP_LIMIT = 50
INLINE_DELAY_MS = 10_000
EVENT_WAIT_MS = 30 * 24 * 60 * 60 * 1000


async def run(state: TurnState) -> None:
    """Move every live run, then hand an unanswered message down the suspended stack."""
    if state.done:
        return
    if not state.asking() and state.floor_run_id is None:
        resumed = state.most_recently_suspended()
        if resumed is not None:
            _resume(state, resumed)
    await _queue(state)
    if not state.is_message or state.request.silenced is not None:
        return
    while not answered(state) and not state.asking():
        resumed = state.most_recently_suspended()
        if resumed is None:
            break
        _resume(state, resumed)
        await _queue(state)


def answered(state: TurnState) -> bool:
    """Someone answered this turn: a speaker is queued or a run already replied."""
    return state.speaker is not None or bool(state.answered_by)


def _resume(state: TurnState, run: Run) -> None:
    state.set_status(run, "asking")
    run.suspended_seq = None
    state.outcome("resumed", run)
    if state.is_message:
        apply_branches(state, run, None)


def apply_branches(state: TurnState, run: Run, judged: dict[str, bool] | None) -> bool:
    """The first true branch of the run's talk step takes its ``then`` (code ``branch``).

    ``if`` branches are judged by code; ``when`` branches by ``judged`` (the envelope's
    answers, keyed ``{run_id}/{step_id}/{index}``), skipped when ``judged`` is None.
    """
    flow = state.flow(run.flow_id)
    step = flow.step(run.step_id) if flow else None
    if flow is None or not isinstance(step, TalkStep):
        return False
    for index, branch in enumerate(step.branches):
        if branch.if_ is not None:
            hit = state.holds(branch.if_, run)
        else:
            hit = bool(judged and judged.get(f"{run.id}/{step.id}/{index}") is True)
        if hit:
            state.set_status(run, "running")
            state.outcome("branch", run, detail=str(index))
            take(state, run, flow, step, branch.then)
            return True
    return False


async def _queue(state: TurnState) -> None:
    # The runs in session order, then those started while walking. A parked run is passed over
    # before any lookup; any other is walked only if it is still live (an earlier walk may
    # have ended it). Runs are never replaced in the list, so a live id is the same object.
    # The ids already queued are gathered only once a walk starts a run: most turns start
    # none, and a session of many parked runs would pay for the set on every turn.
    order = list(state.session.runs)
    seen: set[str] | None = None
    minted = state.session.seq
    for current in order:  # runs appended to ``order`` below are reached too
        if current.status in ("waiting", "suspended") or state.live(current.id) is not current:
            continue
        if current.status == "asking":
            if not state.is_message or current.id in state.moved_runs:
                continue
            current.visit += 1  # a new answer to a new message gets its own key
        state.moved_runs.add(current.id)
        await walk(state, current)
        if state.session.seq != minted:  # runs started by this walk join the queue
            minted = state.session.seq
            if seen is None:
                seen = {r.id for r in order}
            for r in state.session.runs:
                if r.id not in seen:
                    seen.add(r.id)
                    order.append(r)


def _premise_holds(state: TurnState, run: Run, flow: Flow) -> bool:
    if flow.when is not None:
        return state.holds(flow.when, run)
    if run.trigger is not None and run.trigger < len(flow.on):
        return state.holds(flow.on[run.trigger].if_, run)
    return True


async def walk(state: TurnState, run: Run, *, after_speak: bool = False) -> None:
    """Walk ``run`` from its current step until a step stops it."""
    flow = state.flow(run.flow_id)
    if flow is None:
        state.end_run(run, "flow-gone", detail=run.flow_id)
        return
    if not after_speak:
        if not _premise_holds(state, run, flow):
            state.end_run(run, "premise-changed")
            return
        last_user = state.session.last_user_at
        if (
            run.origin == "silence"
            and state.kind == "wake"
            and last_user is not None
            and last_user > run.started_at
        ):
            state.end_run(run, "customer-replied")
            return
    was_asking = run.status == "asking"
    while True:
        step = flow.step(run.step_id)
        if step is None:
            state.end_run(run, "step-gone", detail=run.step_id)
            return
        taken = state.steps_taken.get(run.id, 0) + 1
        state.steps_taken[run.id] = taken
        if taken > STEP_LIMIT:
            state.end_run(run, "step-loop", detail=f"{STEP_LIMIT} steps")
            return
        if not await _step(state, run, flow, step, was_asking, after_speak):
            return
        was_asking = False


async def _step(
    state: TurnState, run: Run, flow: Flow, step: AnyStep, was_asking: bool, after_speak: bool
) -> bool:
    if isinstance(step, TalkStep):
        return _talk(state, run, flow, step, was_asking, after_speak)
    if isinstance(step, SayStep):
        return _say(state, run, flow, step)
    if isinstance(step, DoStep):
        return await _do(state, run, flow, step)
    if isinstance(step, WaitStep):
        return _wait(state, run, flow, step)
    assert isinstance(step, IfStep)
    hit = state.holds(step.if_, run)
    state.outcome("if", run, detail="then" if hit else "else")
    return take(state, run, flow, step, step.then if hit else (step.else_ or "end"))


def _talk(
    state: TurnState, run: Run, flow: Flow, step: TalkStep, was_asking: bool, after_speak: bool
) -> bool:
    run.last_talk_step_id = step.id
    staying = run.stay_step_id == step.id
    if step.collect and not pending(state, run, step) and not staying:
        for name in maxed(state, run, step):
            state.outcome("max-asks", run, detail=name)
        state.outcome("already-known", run)
        return take(state, run, flow, step, step.then)
    silenced = state.request.silenced
    if silenced is not None:
        if was_asking:
            state.set_status(run, "asking")
            state.outcome("silenced", run, detail=silenced.reason)
            return False
        state.end_run(run, "silenced", detail=silenced.reason)
        return False
    if state.speaker is not None and state.speaker.run_id != run.id and not after_speak:
        state.suspend(run)
        state.outcome("queued", run, detail=f"behind {state.speaker.run_id}")
        return False
    for other in state.asking():
        if other.id != run.id:
            state.suspend(other)
    state.set_status(run, "asking")
    if after_speak:
        state.outcome("awaiting-reply", run)
        return False
    question = render(step.question, scopes(state, run)) if step.question else None
    state.speaker = Speaker(run_id=run.id, step_id=step.id, question=question)
    if state.floor_run_id is None:
        state.floor_run_id = run.id
    return False


def _say(state: TurnState, run: Run, flow: Flow, step: SayStep) -> bool:
    silenced = state.request.silenced
    if silenced is not None:
        state.end_run(run, "silenced", detail=silenced.reason)
        return False
    claim_key = f"say:{flow.id}/{step.id}"
    if step.once and claim_key in state.session.claims:
        state.outcome("already-sent", run)
        return take(state, run, flow, step, step.then)
    text = render(step.say, scopes(state, run))
    state.send(run, "verbatim", text, state.talk_key(run), step.id)
    if step.once:
        state.claim(claim_key)
    state.answered_by.append(run.id)
    state.outcome("said", run)
    return take(state, run, flow, step, step.then)


async def _do(state: TurnState, run: Run, flow: Flow, step: DoStep) -> bool:
    action = state.config.actions.get(step.do)
    if action is None:
        state.outcome("action-failed", run, detail=f'unknown action "{step.do}"')
        return take(state, run, flow, step, step.on_fail or step.then)
    ctx = action_context(
        key=state.talk_key(run),
        with_=render_value(dict(step.with_), scopes(state, run)),
        data=dict(state.session.data),
        context=state.request.context,
        input=dict(run.input),
        session_id=state.session.id,
        now=state.now,
        run_id=run.id,
        flow_id=flow.id,
        step_id=step.id,
    )
    try:
        result = read_result(await call_handler(action.handler, ctx))
    except Exception as exc:  # a handler's error is the run's outcome, never the turn's
        state.outcome("action-failed", run, detail=str(exc) or type(exc).__name__)
        return take(state, run, flow, step, step.on_fail or step.then)
    if result.kind == "ok":
        if result.data:
            state.session.data.update(result.data)
        if result.spoke:
            state.answered_by.append(run.id)
        state.outcome("action-ok", run)
        return take(state, run, flow, step, step.then)
    if result.kind == "skipped":
        state.outcome("action-skipped", run, detail=result.reason or None)
        return take(state, run, flow, step, step.then)
    if result.kind == "failed":
        state.outcome("action-failed", run, detail=result.reason or None)
        return take(state, run, flow, step, step.on_fail or step.then)
    at = state.now + timedelta(milliseconds=result.ms)
    key = f"{state.talk_key(run)}:defer:{ms(at)}"
    state.park(run, key=key, kind="defer", at=at)
    state.outcome("action-deferred", run, detail=f"{result.ms}ms")
    return False


def _next_step(flow: Flow, step: AnyStep) -> AnyStep | None:
    move = step.then
    if move is None:
        index = flow.index(step.id)
        return flow.steps[index + 1] if index + 1 < len(flow.steps) else None
    if isinstance(move, str):
        return None if move == "end" else flow.step(move)
    step_id = getattr(move, "step", None)
    return flow.step(step_id) if isinstance(step_id, str) else None


def _wait(state: TurnState, run: Run, flow: Flow, step: WaitStep) -> bool:
    kind: WaitKind
    if isinstance(step.wait, TimerWait):
        delay = step.wait.ms
        following = _next_step(flow, step)
        if delay <= INLINE_DELAY_MS and isinstance(following, SayStep | TalkStep):
            state.inline_after_ms[run.id] = state.inline_after_ms.get(run.id, 0) + delay
            state.outcome("inline-delay", run, detail=f"{delay}ms")
            return take(state, run, flow, step, step.then)
        at = state.now + timedelta(milliseconds=delay)
        kind = "timer"
        event = None
    else:
        assert isinstance(step.wait, EventWait)
        at = state.now + timedelta(milliseconds=step.wait.up_to_ms or EVENT_WAIT_MS)
        kind = "event"
        event = step.wait.event
    if step.business_hours:
        at = next_open(at, state.config.business_hours)
    key = state.talk_key(run)
    state.park(run, key=key, kind=kind, at=at, event=event)
    state.outcome("waiting", run, detail=at.isoformat().replace("+00:00", "Z"))
    return False
