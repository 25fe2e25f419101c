"""Phase 7, Settle: the one place the spoken result is applied, then the bookkeeping.

Spoken: the message goes out (``ai``), envelope values are validated and written, tool patches
as given; fields still pending get ``asked + 1`` and the run stays asking; nothing pending takes
``then`` and keeps moving (a talk step reached now waits for the next message). Deferred: a
retryable failure re-parks the step on the retry ladder (+1m, +5m, +15m, +1h, +6h, then the run
ends failed); a fatal one ends the run at once. The idle speaker has no step to re-park: a
failed idle reply sends the agent's ``fallback_message`` when it has one, else a retryable
failure is raised (``ProviderError``, ``UnusableReply`` for an answer with no usable message) so
the host retries the message, and the customer is never left unanswered without a trace.
Then: ``last_assistant_at``, the suspended stack, and silence wakes.

``last_assistant_at`` is when the reply was final, read from the agent's clock again after a
turn that made a model call, not when the turn began: a turn slower than a silence (a slow
model, tool rounds) must not be followed at once by the silence flow. A recording agent keeps
this reading with the turn's time, so a replay reads the same one.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from engine.clock import to_utc
from engine.collect import maxed, pending, write_fields
from engine.config import TalkStep
from engine.errors import BudgetSpent, ProviderError, UnusableReply
from engine.keys import session_key
from engine.lifecycle import handoff, speak_budget
from engine.lifecycle import tools as builtin_tools
from engine.lifecycle import turn as lifecycle_turn
from engine.moves import take
from engine.phases.advance import walk
from engine.session import Run
from engine.starts import repeat_blocked
from engine.state import SpeakReply, TurnState
from engine.values import ms

RETRY_LADDER_MS = (60_000, 300_000, 900_000, 3_600_000, 21_600_000)


async def run(state: TurnState) -> None:
    """Apply the reply, then the three bookkeeping moves."""
    if state.done:
        return
    if handoff.settle_requested(state):
        return  # lifecycle: the speak call handed over; nothing else moves
    await _apply_reply(state)
    session = state.session
    if state.messages:
        session.last_assistant_at = _spoke_at(state)
    if not state.asking():
        resumed = state.most_recently_suspended()
        if resumed is not None:
            state.set_status(resumed, "asking")
            resumed.suspended_seq = None
            state.outcome("resumed", resumed)
    _silence_wakes(state)


async def _apply_reply(state: TurnState) -> None:
    speaker, reply = state.speaker, state.reply
    if speaker is None or reply is None or reply.skipped:
        return
    if speaker.run_id is None:
        _idle(state)
        return
    run = state.live(speaker.run_id)
    flow = state.flow(run.flow_id) if run else None
    step = flow.step(run.step_id) if flow and run else None
    if run is None or flow is None or not isinstance(step, TalkStep):
        return
    if reply.text is None:
        _budget_spent(state, reply)
        _defer(state, run, reply, reply.calls)
        return
    question = speaker.question is not None
    state.send(run, "verbatim" if question else "ai", reply.text, state.talk_key(run), step.id)
    write_fields(state, reply.values, run)
    for patch in reply.patches:
        state.session.data.update(patch)
    run.retries = 0
    state.outcome("asked" if question else "spoke", run, llm_calls=reply.calls)
    if builtin_tools.finish_task(state, run):
        return  # lifecycle: complete_task finished this run's task
    still = pending(state, run, step)
    for name in still:
        run.asked[name] = run.asked.get(name, 0) + 1
    if still:
        return  # the answer to this ask (the last one included) is the next message
    for name in maxed(state, run, step):
        state.outcome("max-asks", run, detail=name)
    if run.stay_step_id == step.id:
        return  # stays for the next message; that message's answer is the next visit
    state.set_status(run, "running")
    if take(state, run, flow, step, step.then):
        await walk(state, run, after_speak=True)
    # A hand-off on the way starts a child that has not moved yet: it moves now, under the same
    # rule (a talk step it reaches waits for the next message), so no run is left "running".
    while True:
        child = next((r for r in state.session.runs if r.status == "running"), None)
        if child is None:
            return
        await walk(state, child, after_speak=True)


def _spoke_at(state: TurnState) -> datetime:
    """The agent's clock as the reply is final, when the turn waited on the model; never
    before the turn's own time. A turn that made no model call keeps its own time: it took
    no time worth a second reading, and its replay then needs no recording to be exact."""
    if state.llm_calls == 0:
        return state.now
    now = to_utc(state.config.clock.now())
    return now if now > state.now else state.now


def _idle(state: TurnState) -> None:
    reply = state.reply
    assert reply is not None
    request = state.request
    trigger_key = request.id or f"{ms(request.at or state.now)}"
    if reply.text is None:
        turn = lifecycle_turn.of(state)
        own = turn.settings.fallback_message if turn is not None else None
        if own is not None and turn is not None:
            key = state.session_key("idle", trigger_key)
            state.send(None, "ai", own, key, None)
            turn.fallback = True
            state.outcome(
                "fallback", step_id="idle", detail=reply.error, llm_calls=reply.calls,
                status="idle",
            )
            return
        _budget_spent(state, reply)
        if reply.deferred == "retryable":
            # Nothing of this turn is kept: the host runs the message again later.
            error = reply.error or "the idle reply failed"
            if reply.unusable:
                raise UnusableReply(f"idle: {error}")
            raise ProviderError(f"idle: {error}", kind="retryable",
                                retry_after=reply.retry_after_s)
        state.outcome(
            "deferred", step_id="idle", detail=reply.error, llm_calls=reply.calls, status="idle"
        )
        return
    state.send(None, "ai", reply.text, state.session_key("idle", trigger_key), None)
    for patch in reply.patches:
        state.session.data.update(patch)
    state.outcome("idle", step_id="idle", llm_calls=reply.calls, status="idle")


def _budget_spent(state: TurnState, reply: SpeakReply) -> None:
    """A lifecycle agent's customer message whose tool budget (``max_tool_calls``) ran out with
    nothing to say and no ``fallback_message``: ``BudgetSpent``, which a host answers with its
    fallback at once (a retry, or a step's retry ladder, would run the tools again for the
    same message). An agent without lifecycle settings keeps the engine's retry paths."""
    if (
        reply.error == speak_budget.BUDGET_SPENT
        and state.request.kind == "message"
        and lifecycle_turn.of(state) is not None
    ):
        raise BudgetSpent(f"speak: {reply.error}")


def _defer(state: TurnState, run: Run, reply: SpeakReply, calls: int) -> None:
    error = reply.error
    if reply.deferred == "fatal" or run.retries >= len(RETRY_LADDER_MS):
        state.outcome("deferred", run, detail=error, llm_calls=calls)
        state.end_run(run, "failed", detail=error)
        return
    # The ladder's step, or later when the server asked for more time (a 429's Retry-After):
    # a retry that is sure to be refused again would only burn a rung.
    # The hint comes from ``ProviderError.retry_after``, which bounds it to a day.
    delay_ms = max(RETRY_LADDER_MS[run.retries], int((reply.retry_after_s or 0) * 1000))
    at = state.now + timedelta(milliseconds=delay_ms)
    key = f"{state.talk_key(run)}:retry:{ms(at)}"
    run.retries += 1
    state.park(run, key=key, kind="retry", at=at)
    state.outcome("deferred", run, detail=error, llm_calls=calls)


def _silence_wakes(state: TurnState) -> None:
    session = state.session
    spoke_at = session.last_assistant_at
    if spoke_at is None or (session.last_user_at is not None and session.last_user_at > spoke_at):
        return
    for flow, _, trigger in state.config.silence_triggers:
        key = session_key("silence", session.id, f"{flow.id}:{ms(spoke_at)}")
        previous = session.silence_wakes.get(flow.id)
        if previous == key:
            continue
        if not state.holds(trigger.if_) or repeat_blocked(state, flow):
            continue
        at = spoke_at + timedelta(milliseconds=trigger.silence)
        state.schedule_wake(key, at, replaces=previous)
        session.silence_wakes[flow.id] = key
