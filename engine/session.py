"""The per-conversation state the host saves: ``Session`` v4, its ``Run`` records, migration.

Invariants: a session is plain JSON once dumped (``model_dump(mode="json")``) and
``migrate_session`` reads that dump back to an equal session. ``version`` belongs to the store;
a turn never changes it. Ids the engine mints (runs, suspension order) come from ``seq``, a
counter kept in the session, so a replay of the same inputs mints the same ids.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from engine.clock import to_utc

RunStatus = Literal["running", "asking", "waiting", "suspended"]
WaitKind = Literal["timer", "event", "defer", "retry", "trigger"]
INPUT_RING = 50


def _utc_or_none(value: Any) -> Any:
    return None if value is None else to_utc(value)


UtcDatetime = Annotated[datetime, BeforeValidator(to_utc)]
"""A datetime stored as aware UTC whatever came in: an ISO string, naive (meaning UTC) or
another zone; so sessions from any host compare and serialise alike."""

OptionalUtcDatetime = Annotated[datetime | None, BeforeValidator(_utc_or_none)]
"""``UtcDatetime`` or None."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", validate_assignment=False)


class Waiting(_Model):
    """Why a run is parked: the wake ``key`` that resumes it, and when or what it waits for."""

    key: str
    kind: WaitKind
    at: OptionalUtcDatetime = None
    event: str | None = None


class Run(_Model):
    """One live run of a flow.

    ``visit`` counts how many times the run entered its current step (keys carry it).
    ``asked`` counts how many times each field was asked. ``trigger`` is the index of the flow
    trigger that started it (None for a host start or a hand-off); ``origin`` is how it started.
    ``suspended_seq`` orders the suspended stack; ``retries`` counts speak retries on this step;
    ``stay_step_id`` is the talk step an ``on_end: "stay"`` run went back to.
    """

    id: str
    flow_id: str
    status: RunStatus = "running"
    step_id: str
    visit: int = 1
    input: dict[str, Any] = Field(default_factory=dict)
    asked: dict[str, int] = Field(default_factory=dict)
    waiting: Waiting | None = None
    started_at: UtcDatetime
    parent_run_id: str | None = None
    trigger: int | None = None
    origin: Literal["message", "mention", "event", "silence", "start", "flow"] = "message"
    suspended_seq: int | None = None
    retries: int = 0
    last_talk_step_id: str | None = None
    stay_step_id: str | None = None


class Claim(_Model):
    """A record that something already happened here: a flow start or a ``once`` say."""

    at: UtcDatetime
    count: int = 1


class Session(_Model):
    """One conversation's state, saved by the host between turns."""

    id: str
    v: Literal[4] = 4
    version: int = 0
    data: dict[str, Any] = Field(default_factory=dict)
    runs: list[Run] = Field(default_factory=list)
    claims: dict[str, Claim] = Field(default_factory=dict)
    inputs: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    last_user_at: OptionalUtcDatetime = None
    last_assistant_at: OptionalUtcDatetime = None
    seq: int = 0
    silence_wakes: dict[str, str] = Field(default_factory=dict)

    def run(self, run_id: str) -> Run | None:
        for run in self.runs:
            if run.id == run_id:
                return run
        return None

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq


def fresh_session(session_id: str) -> Session:
    """A session no turn has touched yet."""
    return Session(id=session_id)


_V3_KEYS = {
    "lastUserAt": "last_user_at",
    "lastAssistantAt": "last_assistant_at",
    "flowId": "flow_id",
    "stepId": "step_id",
    "startedAt": "started_at",
    "parentRunId": "parent_run_id",
}


def _snake(value: Any) -> Any:
    if isinstance(value, dict):
        return {_V3_KEYS.get(k, k): _snake(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_snake(v) for v in value]
    return value


def migrate_session(raw: Session | dict[str, Any]) -> Session:
    """Read a stored session of any known shape into a v4 ``Session``.

    v4 dumps are read as is. Older shapes (no ``v`` or ``v`` < 4, camelCase keys, claims as
    timestamps, runs without ``visit``) are upgraded; the host calls this where it
    deserializes, before ``turn()``.
    """
    if isinstance(raw, Session):
        return raw.model_copy(deep=True)
    if raw.get("v") == 4:
        return Session.model_validate(raw)
    data = _snake(dict(raw))
    data["v"] = 4
    data.setdefault("version", 0)
    claims = data.get("claims") or {}
    upgraded: dict[str, Any] = {}
    for key, claim in claims.items():
        if isinstance(claim, dict):
            upgraded[key if ":" in key else f"flow:{key}"] = claim
        else:
            upgraded[key if ":" in key else f"flow:{key}"] = {"at": claim, "count": 1}
    data["claims"] = upgraded
    runs = []
    for run in data.get("runs") or []:
        run = dict(run)
        run.setdefault("visit", 1)
        run.setdefault("started_at", data.get("last_user_at") or "1970-01-01T00:00:00Z")
        if run.get("status") not in ("running", "asking", "waiting", "suspended"):
            run["status"] = "asking"
        runs.append(run)
    data["runs"] = runs
    data["inputs"] = list(data.get("inputs") or [])[-INPUT_RING:]
    return Session.model_validate(data)
