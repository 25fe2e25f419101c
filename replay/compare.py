"""Comparing a replayed turn with the recorded one, aspect by aspect, as readable lines.

Each aspect renders to lines that leave out what a replay may legitimately change without
changing behaviour (run ids and the keys built from them):

    messages   kind: text                         (the order matters)
    outcomes   code flow/step status detail    (run ids in the detail shown as ``r#``)
    started    flow_id (reason)        ended   flow_id (reason)
    skipped    flow_id code
    schedule   at replaces?                       (one line per wake)
    fields     name = value                       (only when the turn's fields were recorded)

A difference is shown as a line diff: ``-`` recorded, ``+`` replayed, two spaces unchanged.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any

from replay.conversations import Recorded

__all__ = ["ASPECTS", "Difference", "compare", "render_diff"]

ASPECTS = ("messages", "outcomes", "started", "ended", "skipped", "schedule", "fields", "error")


@dataclass(frozen=True)
class Difference:
    """One aspect that differs: its recorded and replayed lines."""

    aspect: str
    recorded: list[str]
    replayed: list[str]

    def diff(self) -> list[str]:
        return render_diff(self.recorded, self.replayed)


# A run id (``r1``, or ``r1@<session>``) inside an outcome's detail (a wake key, a talk key):
# shown as ``r#`` so a change in how run ids are spelled is not a change in behaviour.
_RUN_ID = re.compile(r"\br\d+(?:@[^:/\s]+)?")


def _part(value: Any) -> str:
    return "" if value in (None, "") else str(value)


def _message(m: dict[str, Any]) -> str:
    return f"{m.get('kind')}: {m.get('text')}"


def _outcome(o: dict[str, Any]) -> str:
    where = "/".join(p for p in (_part(o.get("flow_id")), _part(o.get("step_id"))) if p)
    return " ".join(p for p in (str(o.get("code")), where, _part(o.get("status")),
                                _RUN_ID.sub("r#", _part(o.get("detail")))) if p)


def _change(c: dict[str, Any]) -> str:
    return f"{c.get('flow_id')} ({c.get('reason')})"


def _skip(s: dict[str, Any]) -> str:
    return f"{s.get('flow_id')} {s.get('code')}"


def _wake(w: dict[str, Any]) -> str:
    return f"{w.get('at')}" + (" (replaces an earlier wake)" if w.get("replaces") else "")


def _value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def lines(recorded: Recorded) -> dict[str, list[str]]:
    """The recorded (or replayed) turn as comparable lines per aspect."""
    out = {
        "messages": [_message(m) for m in recorded.messages],
        "outcomes": [_outcome(o) for o in recorded.outcomes],
        "started": [_change(c) for c in recorded.started],
        "ended": [_change(c) for c in recorded.ended],
        "skipped": [_skip(s) for s in recorded.skipped],
        "schedule": [_wake(w) for w in recorded.schedule],
    }
    if recorded.fields is not None:
        out["fields"] = [f"{k} = {_value(v)}" for k, v in sorted(recorded.fields.items())]
    return out


def compare(recorded: Recorded, replayed: Recorded) -> list[Difference]:
    """The aspects in which ``replayed`` departs from ``recorded``, in ``ASPECTS`` order."""
    before, after = lines(recorded), lines(replayed)
    found = []
    for aspect in ASPECTS:
        if aspect not in before or aspect not in after:
            continue
        if before[aspect] != after[aspect]:
            found.append(Difference(aspect, before[aspect], after[aspect]))
    return found


def render_diff(recorded: list[str], replayed: list[str]) -> list[str]:
    """``-`` recorded, ``+`` replayed, ``  `` unchanged lines, in order."""
    out: list[str] = []
    matcher = difflib.SequenceMatcher(a=recorded, b=replayed, autojunk=False)
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        if op == "equal":
            out += [f"  {line}" for line in recorded[a1:a2]]
            continue
        out += [f"- {line}" for line in recorded[a1:a2]]
        out += [f"+ {line}" for line in replayed[b1:b2]]
    return out
