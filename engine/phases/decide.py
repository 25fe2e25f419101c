"""Phase 4, Decide: code applies the judgement in a fixed order.

1. Routing (skipped when a run took the floor in Ingest): a takeover needs a score >= 40 that
   beats the asker's by >= 15; with no asker the best score >= 40 starts, else the first
   catch-all, else nobody. 2. Mention runs, in flow order. 3. The routed run starts (applying
   ``clear_on_start``) or resumes, and holds the floor. 4. Field values, validated one by one;
   a known ``correctable`` field offered for a change takes a new valid value (outcome
   ``corrected``) and the asking run takes its step's or flow's ``on_correction`` move.
5. The first true branch of the asking step.
"""

from __future__ import annotations

from engine.collect import write_fields
from engine.config import Flow, TalkStep
from engine.envelopes import Judgement
from engine.moves import take
from engine.phases.advance import apply_branches
from engine.session import Run
from engine.starts import blocked
from engine.state import Candidates, TurnState
from engine.values import BadValue, coerce, is_known

START_SCORE = 40
TAKEOVER_MARGIN = 15


def run(state: TurnState) -> None:
    """Route, start mention runs, start or resume the routed run, write fields, branch."""
    if state.done or not state.is_message:
        return
    found: Candidates | None = state.candidates
    if found is None:
        return  # silenced without understand: nothing is judged, nothing starts
    judgement = state.judgement or Judgement()
    asker = state.asker()
    routed = None if state.floor_taken else _route(state, found, judgement, asker)
    _mentions(state, judgement)
    if routed is not None:
        flow, index = routed
        if asker is not None and asker.flow_id != flow.id:
            state.suspend(asker)
            state.outcome("taken-over", asker, detail=flow.id)
            asker = None
        _start_routed(state, flow, index)
    elif asker is not None and not state.floor_taken:
        state.floor_run_id = asker.id
    # A known field offered because a candidate would clear it lands only if it was cleared.
    write_fields(
        state,
        {
            name: value
            for name, value in judgement.fields.items()
            if (name not in found.plan.if_cleared or not is_known(state.session.data, name))
            and name not in found.plan.corrections
        },
    )
    corrected = _corrections(state, found, judgement, asker)
    if asker is not None and asker.status == "asking" and corrected:
        _react(state, asker)
    if asker is not None and asker.status == "asking":
        apply_branches(state, asker, judgement.branches)


def _corrections(
    state: TurnState, found: Candidates, judgement: Judgement, asker: Run | None
) -> bool:
    """Write each offered correction that is valid and differs from the known value; True
    when one did. The outcome names the field, never the value."""
    corrected = False
    for name in sorted(found.plan.corrections):
        value = judgement.fields.get(name)
        if value is None:
            continue
        try:
            fitted = coerce(name, state.config.fields.get(name), value)
        except BadValue as bad:
            state.outcome(bad.code, asker, detail=bad.detail)
            continue
        if state.session.data.get(name) == fitted:
            continue
        state.session.data[name] = fitted
        state.outcome("corrected", asker, detail=name)
        corrected = True
    return corrected


def _react(state: TurnState, run: Run) -> None:
    """The author's reaction to a correction: the asking step's ``on_correction``, else the
    flow's; with neither the run keeps asking where it is."""
    flow = state.flow(run.flow_id)
    step = flow.step(run.step_id) if flow else None
    if flow is None or not isinstance(step, TalkStep):
        return
    move = step.on_correction if step.on_correction is not None else flow.on_correction
    if move is None:
        return
    state.set_status(run, "running")
    take(state, run, flow, step, move)


def _best(found: Candidates, judgement: Judgement) -> tuple[tuple[Flow, int] | None, int]:
    best: tuple[Flow, int] | None = None
    best_score = -1
    for flow, index in found.eligible:
        score = judgement.flows.get(flow.id)
        if score is not None and score > best_score:
            best, best_score = (flow, index), score
    return best, best_score


def _route(
    state: TurnState, found: Candidates, judgement: Judgement, asker: Run | None
) -> tuple[Flow, int] | None:
    if asker is not None:
        asker_score = judgement.flows.get(asker.flow_id, 0)
        best, score = _best(found, judgement)
        if best is not None and score >= START_SCORE and score >= asker_score + TAKEOVER_MARGIN:
            return best
        return None
    if found.lone is not None:
        return found.lone
    best, score = _best(found, judgement)
    if best is not None and score >= START_SCORE:
        return best
    return found.catch_all


def _start_routed(state: TurnState, flow: Flow, index: int) -> None:
    suspended = [r for r in state.suspended() if r.flow_id == flow.id]
    if suspended:
        resumed = max(suspended, key=lambda r: r.suspended_seq or 0)
        for other in state.asking():
            state.suspend(other)
        state.set_status(resumed, "asking")
        resumed.suspended_seq = None
        state.outcome("resumed", resumed)
        state.routed_run_id = state.floor_run_id = resumed.id
        return
    live = next((r for r in state.session.runs if r.flow_id == flow.id), None)
    if live is not None:
        state.skip(flow.id, "already-running")
        state.floor_run_id = live.id
        return
    new = state.new_run(flow, origin="message", trigger=index, input={}, reason="message")
    state.routed_run_id = state.floor_run_id = new.id


def _mentions(state: TurnState, judgement: Judgement) -> None:
    for flow, index, trigger in state.config.mention_triggers:
        if trigger.mention and judgement.mentions.get(flow.id) is not True:
            continue
        values = judgement.extract.get(flow.id, {})
        run_input = {}
        for param, value in values.items():
            try:
                run_input[param] = coerce(param, trigger.extract.get(param), value)
            except BadValue as bad:
                state.outcome(bad.code, detail=bad.detail)
        code = blocked(state, flow, trigger.if_, input=run_input)
        if code:
            state.skip(flow.id, code)
            continue
        state.new_run(flow, origin="mention", trigger=index, input=run_input, reason="mention")
