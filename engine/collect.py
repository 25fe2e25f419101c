"""Field collection: what a talk step still needs, and the one door into ``session.data``.

Pending = collect minus known minus fields already asked ``max_asks`` times. Every value the
model gives goes through ``write_field``: unknown names (``unknown-field``), values that do not
fit the type (``bad-value``) and values outside the enum (``not-in-enum``) are dropped.
Names a model call was not offered never get this far: the envelope parsers refuse them and
``refuse`` records each as ``unknown-field`` (bounded, names only, never the value).
"""

from __future__ import annotations

from typing import Any

from engine.config import TalkStep
from engine.session import Run
from engine.state import TurnState
from engine.values import BadValue, coerce, is_known


def pending(state: TurnState, run: Run, step: TalkStep) -> list[str]:
    """The step's fields still worth asking, in collect order."""
    out = []
    for name in step.collect:
        if is_known(state.session.data, name):
            continue
        spec = state.config.fields[name]
        if run.asked.get(name, 0) >= spec.max_asks:
            continue
        out.append(name)
    return out


def maxed(state: TurnState, run: Run, step: TalkStep) -> list[str]:
    """Unknown fields of the step that hit ``max_asks``."""
    return [
        name
        for name in step.collect
        if not is_known(state.session.data, name)
        and run.asked.get(name, 0) >= state.config.fields[name].max_asks
    ]


def write_field(state: TurnState, name: str, value: Any, run: Run | None = None) -> bool:
    """Validate and write one value; log and drop it when it does not fit."""
    if value is None:
        return False
    try:
        fitted = coerce(name, state.config.fields.get(name), value)
    except BadValue as bad:
        state.outcome(bad.code, run, detail=bad.detail)
        return False
    state.session.data[name] = fitted
    return True


# A reply may hold thousands of made-up names; the turn log keeps the first few and a count.
MAX_REFUSED_OUTCOMES = 10
_MAX_NAME_CHARS = 64


def refuse(state: TurnState, call: str, names: list[str], run: Run | None = None) -> None:
    """Record names a ``call`` (understand or speak) returned without being offered them."""
    for name in names[:MAX_REFUSED_OUTCOMES]:
        shown = name if len(name) <= _MAX_NAME_CHARS else name[:_MAX_NAME_CHARS] + "..."
        state.outcome("unknown-field", run, detail=f"{call} was not offered {shown!r}")
    if len(names) > MAX_REFUSED_OUTCOMES:
        more = len(names) - MAX_REFUSED_OUTCOMES
        state.outcome("unknown-field", run, detail=f"{call} returned {more} more names not offered")


def write_fields(state: TurnState, values: dict[str, Any], run: Run | None = None) -> None:
    """Write several values one at a time, in the order given."""
    for name, value in values.items():
        write_field(state, name, value, run)
