"""Conversations as a replay sees them: each turn's input, clock, model calls and results.

A conversation comes either from the turn log (``from_logged``) or from a golden file
(``replay.golden``); both give the same ``Conversation``, so a replay does not care where it
came from. ``Recorded`` holds only what a replay compares, in the turn log's JSON form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engine.clock import to_utc
from store import LoggedTurn

__all__ = ["Conversation", "Recorded", "RecordedTurn", "from_logged", "iso"]


@dataclass(frozen=True)
class Recorded:
    """What a turn produced, as logged (the ``TurnResult`` fields in their JSON form).

    ``fields`` (the session fields the turn wrote) is None when it was not recorded: a replay
    then does not compare fields for that turn. ``state`` is the digest of the state the turn
    left (``engine.recording.state_digest``), None when it was not recorded: after a departure
    it tells whether the next turn starts from the same state, so the comparison can go on.
    """

    messages: list[dict[str, Any]] = field(default_factory=list)
    schedule: list[dict[str, Any]] = field(default_factory=list)
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    started: list[dict[str, Any]] = field(default_factory=list)
    ended: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    llm_calls: int = 0
    fields: dict[str, Any] | None = None
    state: str | None = None


@dataclass(frozen=True)
class RecordedTurn:
    """One turn: the input as the host sent it, the time the engine ran it at, the model's
    recorded calls (None when nothing was recorded) and what the turn produced.

    ``logged_at`` is when the turn was saved; the host's history gives it to assistant entries
    (and to user entries whose input has no ``at``), so a replay rebuilds the same history.
    """

    version: int
    input: dict[str, Any]
    at: datetime
    logged_at: datetime
    calls: list[dict[str, Any]] | None
    recorded: Recorded
    # When the turn's reply was final by the engine's clock (its ``last_assistant_at``), when
    # that was later than ``at``; None when the recording kept no later reading.
    spoke_at: datetime | None = None
    # What answered the turn, as the turn log names it: the agent's id and, for an agent from
    # the registry, the version that ran (None for an agent loaded from code, or not recorded).
    agent_id: str | None = None
    agent_version: int | None = None

    @property
    def kind(self) -> str:
        for kind in ("message", "wake", "event", "start"):
            if self.input.get(kind) is not None:
                return kind
        return "unknown"


@dataclass(frozen=True)
class Conversation:
    """A session's turns, oldest first."""

    session_id: str
    turns: list[RecordedTurn]

    @property
    def complete(self) -> bool:
        """Whether the log starts at the session's first turn with no version missing."""
        return [t.version for t in self.turns] == list(range(1, len(self.turns) + 1))

    @property
    def started_at(self) -> datetime | None:
        return self.turns[0].at if self.turns else None


def iso(value: datetime) -> str:
    """An aware datetime as the ISO text the engine writes (``Z`` for UTC)."""
    return to_utc(value).isoformat().replace("+00:00", "Z")


def _time(value: Any) -> datetime | None:
    """A recorded ISO time, or None for anything else (a recording is never trusted blindly)."""
    if not isinstance(value, str):
        return None
    try:
        return to_utc(value)
    except ValueError:
        return None


def from_logged(turns: list[LoggedTurn]) -> list[Conversation]:
    """Group turn-log rows (ordered by session then version) into conversations."""
    out: list[Conversation] = []
    for row in turns:
        if not out or out[-1].session_id != row.session_id:
            out.append(Conversation(session_id=row.session_id, turns=[]))
        recording = row.model_calls if isinstance(row.model_calls, dict) else None
        calls = recording.get("calls") if recording else None
        fields = recording.get("fields") if recording else None
        state = recording.get("state") if recording else None
        out[-1].turns.append(
            RecordedTurn(
                version=row.version,
                input=dict(row.input),
                at=to_utc(row.clock_at or row.created_at),
                logged_at=to_utc(row.created_at),
                calls=list(calls) if isinstance(calls, list) else None,
                spoke_at=_time(recording.get("spoke_at")) if recording else None,
                agent_id=row.agent_id,
                agent_version=row.agent_version,
                recorded=Recorded(
                    messages=row.messages,
                    schedule=row.schedule,
                    outcomes=row.outcomes,
                    started=row.started,
                    ended=row.ended,
                    skipped=row.skipped,
                    llm_calls=row.llm_calls,
                    fields=fields if isinstance(fields, dict) else None,
                    state=state if isinstance(state, str) else None,
                ),
            )
        )
    return out
