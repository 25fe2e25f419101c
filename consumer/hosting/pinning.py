"""Which version of a registry agent a conversation's turn runs on: pinned or live.

A conversation is pinned to the version its binding records (``metadata["agent"]["version"]``,
the version that ran its last turn) for as long as it has work in progress: any run the engine
left in the session (asking, waiting on a timer or an event, suspended, deferred). A turn of a
conversation with no run uses the agent's live version (or its canary, ``consumer.hosting.canary``),
and from then on the conversation is pinned to that one until its runs end. The unit is the
conversation, not the run: one turn runs one agent over the whole session (its triggers,
fields, suspended stack and hand-offs between runs), so two versions never meet in one turn, and
the turn log's ``agent_version`` rebuilds each turn exactly in replay.

Pure functions over the loaded state's JSON: no I/O here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["has_work_in_progress", "pinned_version"]


def has_work_in_progress(state: dict[str, Any] | None) -> bool:
    """True when the saved session holds at least one run the engine has not ended."""
    runs = state.get("runs") if isinstance(state, dict) else None
    return isinstance(runs, list) and len(runs) > 0


def pinned_version(
    binding: dict[str, Any] | None, state: dict[str, Any] | None, agent_id: str
) -> int | None:
    """The version the conversation is pinned to for ``agent_id``, or None (use the live one):
    only while it has work in progress, and only for the agent its last turn ran."""
    if binding is None or binding.get("agent_id") != agent_id:
        return None
    version = binding.get("version")
    if type(version) is not int or version < 1:
        return None
    return version if has_work_in_progress(state) else None
