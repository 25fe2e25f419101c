"""Skill goals: answers the agent gathers while a skill's goal is active, checked by code.

A skill with a ``goal`` makes it active when the skill is first loaded; the goal lives in
``session.metadata["lifecycle"]["goal"]`` and its skill stays loaded on every turn until the
goal completes. Two tools are offered while it is active, and no allowlist removes them:

- ``submit_goal_fields(answers)``: each answer is fitted to its field exactly as a flow's fields
  are (type, enum); the good ones are kept, every bad or unknown one comes back to the model as
  an error, so it can ask again;
- ``complete_goal()``: refused with the missing field names until every field has an answer;
  then the goal ends and its answers are the turn's ``goal_result`` (outcome
  ``goal_completed``). Inside a Flow task (a run the host started) the goal replaces the task:
  ``complete_task`` is not offered, and completing the goal completes the task with the goal's
  answers as outputs (outcome ``task_completed``).

Goal tools get ``GOAL_HEADROOM`` extra tool calls on top of ``max_tool_calls``: the agent can
always still submit and finish when its other tools used up the budget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.lifecycle.results import GoalResult, TaskResult
from engine.values import BadValue, coerce

if TYPE_CHECKING:
    from engine.lifecycle.settings import GoalSettings
    from engine.lifecycle.turn import LifecycleTurn
    from engine.session import Run

SUBMIT = "submit_goal_fields"
COMPLETE = "complete_goal"
GOAL_TOOLS = (SUBMIT, COMPLETE)
GOAL_HEADROOM = 2


def active(turn: LifecycleTurn) -> GoalSettings | None:
    """The active goal's settings, or None."""
    goal = turn.memory.goal
    if goal is None:
        return None
    for skill in turn.settings.skills:
        if skill.name == goal.get("skill"):
            return skill.goal
    return None


def answers(turn: LifecycleTurn) -> dict[str, Any]:
    goal = turn.memory.goal or {}
    found = goal.get("answers")
    return dict(found) if isinstance(found, dict) else {}


def submit(turn: LifecycleTurn, args: dict[str, Any]) -> dict[str, Any]:
    """Fit each submitted answer to its field; keep the good ones, report the rest."""
    goal = active(turn)
    if goal is None or turn.memory.goal is None:
        return {"error": "no goal is active"}
    given = args.get("answers")
    if not isinstance(given, dict) or not given:
        return {"error": "answers must be an object of field names to values"}
    kept = answers(turn)
    errors: dict[str, str] = {}
    saved: list[str] = []
    for name, value in given.items():
        try:
            kept[str(name)] = coerce(str(name), goal.fields.get(str(name)), value)
            saved.append(str(name))
        except BadValue as exc:
            errors[str(name)] = exc.detail
    turn.memory.goal = {**turn.memory.goal, "answers": kept}
    missing = [n for n in goal.fields if n not in kept]
    out: dict[str, Any] = {"saved": saved, "missing": missing}
    if errors:
        out["errors"] = errors
    return out


def complete(turn: LifecycleTurn, run: Run | None) -> dict[str, Any]:
    """Finish the goal when every field has an answer."""
    goal = active(turn)
    if goal is None or turn.memory.goal is None:
        return {"error": "no goal is active"}
    kept = answers(turn)
    missing = [n for n in goal.fields if n not in kept]
    if missing:
        return {"error": f"missing answers: {', '.join(missing)}"}
    skill = str(turn.memory.goal.get("skill"))
    turn.goal = GoalResult(skill=skill, outputs=kept)
    turn.memory.goal = None
    if run is not None and run.origin == "start":  # a Flow's task: the goal replaced it
        turn.task = TaskResult(outputs=kept, run_id=run.id, flow_id=run.flow_id)
    return {"ok": True, "completed": skill}


def prompt_block(turn: LifecycleTurn) -> str | None:
    """What the model needs to pursue the goal: its aim, the fields and what is answered."""
    goal = active(turn)
    if goal is None:
        return None
    kept = answers(turn)
    lines = []
    for name, spec in goal.fields.items():
        state = f"answered: {kept[name]!r}" if name in kept else "missing"
        about = f" ({spec.description})" if spec.description else ""
        lines.append(f"- {name} [{spec.type}]{about}: {state}")
    return (
        f"## Goal\n{goal.description}\nSubmit answers with {SUBMIT}; call {COMPLETE} once every "
        "field is answered.\n" + "\n".join(lines)
    )
