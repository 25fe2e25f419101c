"""Movement: where a run goes after a step (``then`` / ``else`` / ``on_fail``).

A move is a step id, ``"end"``, ``{"step", "clear"}`` or ``{"flow", "input"}``; None means the
next step in the list. Entering a step bumps ``visit`` so every visit has its own key. A flow
move ends this run and starts a child, at most ``HOP_LIMIT`` hops per turn, unless the target
flow already has a live run (skip ``already-running``: that run keeps going). Reaching the end of
an ``on_end: "stay"`` flow sends the run back to the last talk step it took.
"""

from __future__ import annotations

from typing import Any

from engine.config import AnyStep, Flow, FlowMove, Move, StepMove
from engine.records import write
from engine.session import Run
from engine.state import TurnState
from engine.values import render_value

HOP_LIMIT = 5


def scopes(state: TurnState, run: Run | None) -> dict[str, Any]:
    """The template scopes: ``data`` (bare names), ``context``, ``input``."""
    return {
        "data": state.session.data,
        "context": state.request.context,
        "input": run.input if run else {},
    }


def goto(state: TurnState, run: Run, step_id: str) -> None:
    """Enter ``step_id``: a new visit, a fresh retry ladder. (Every step a run walks comes
    through here, hence ``write``: see ``engine.records``.)"""
    write(run, step_id=step_id, visit=run.visit + 1, retries=0)
    state.set_status(run, "running")


def take(state: TurnState, run: Run, flow: Flow, step: AnyStep, move: Move | None) -> bool:
    """Apply ``move`` from ``step``; True when the run is running and should keep walking."""
    if move is None:
        index = flow.index(step.id)
        if 0 <= index < len(flow.steps) - 1:
            goto(state, run, flow.steps[index + 1].id)
            return True
        return _reach_end(state, run, flow)
    if move == "end":
        state.end_run(run, "completed")
        return False
    if isinstance(move, str):
        goto(state, run, move)
        return True
    if isinstance(move, StepMove):
        for name in move.clear:
            state.session.data.pop(name, None)
            run.asked.pop(name, None)
        goto(state, run, move.step)
        return True
    assert isinstance(move, FlowMove)
    return _hand_off(state, run, move)


def _reach_end(state: TurnState, run: Run, flow: Flow) -> bool:
    if flow.on_end != "stay" or run.last_talk_step_id is None:
        state.end_run(run, "completed")
        return False
    goto(state, run, run.last_talk_step_id)
    run.stay_step_id = run.last_talk_step_id
    others = [r for r in state.asking() if r.id != run.id]
    if others and state.routed_run_id != run.id:
        state.suspend(run)
    else:
        for other in others:
            state.suspend(other)
        state.set_status(run, "asking")
    state.outcome("stay", run)
    return False


def _hand_off(state: TurnState, run: Run, move: FlowMove) -> bool:
    hops = state.hops.get(run.id, 0) + 1
    if hops > HOP_LIMIT:
        state.end_run(run, "hop-limit", detail=f"{HOP_LIMIT} hops")
        return False
    target = state.flow(move.flow)
    if target is None:
        state.end_run(run, "flow-gone", detail=move.flow)
        return False
    child_input = render_value(dict(move.input), scopes(state, run))
    was_floor = state.floor_run_id == run.id
    state.end_run(run, "handoff", detail=move.flow)
    live = next((r for r in state.session.runs if r.flow_id == target.id), None)
    if live is not None:
        # One run of a flow at a time, as for every other start (``engine.starts``): a second
        # one would wait beside the first, and one event or wake would move both (two
        # bookings, each confirmed by the same payment). The live run keeps its place and
        # takes the floor the handing-over run had.
        state.skip(target.id, "already-running")
        if was_floor:
            state.floor_run_id = live.id
        return False
    child = state.new_run(
        target,
        origin="flow",
        trigger=None,
        input=child_input,
        reason=f"flow:{run.flow_id}",
        parent=run,
    )
    state.hops[child.id] = hops
    # The child continues the parent: the parent's say does not silence the child's own talk.
    state.answered_by = [child.id if rid == run.id else rid for rid in state.answered_by]
    if was_floor:
        state.floor_run_id = child.id
        if state.routed_run_id == run.id:
            state.routed_run_id = child.id
    return False
