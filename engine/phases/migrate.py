"""Parked runs moved to a new version's flow and step ids, as the host asks (``migrate_runs``).

A registry host activates a version with a map of old ``flow/step`` ids to new ones
(``turnflow agents activate AGENT V --migrate MAP``); a conversation whose every run in
progress is mapped moves to the new version, and its turn carries the map in the request, so
the move is part of the recorded turn and replays exactly. Each mapped run takes the new flow
and step ids before anything else of the turn happens (its wake key, matched by equality, is
unchanged, so a timer still wakes it), with one ``run-migrated`` outcome line saying from and
to. Runs the map does not name are left as they are.
"""

from __future__ import annotations

from engine.records import write
from engine.state import TurnState


def run(state: TurnState) -> None:
    """Rename each run the request's ``migrate_runs`` names."""
    mapping = state.request.migrate_runs
    if not mapping:
        return
    for parked in state.session.runs:
        old = f"{parked.flow_id}/{parked.step_id}"
        target = mapping.get(old)
        if target is None:
            continue
        flow_id, _, step_id = target.partition("/")
        write(parked, flow_id=flow_id, step_id=step_id)
        state.outcome("run-migrated", parked, detail=f"{old} -> {target}")
