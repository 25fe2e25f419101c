"""The per-conversation state the host saves: ``Session`` v4, its ``Run`` records, migration.

Invariants: a session is plain JSON once dumped (``model_dump(mode="json")``) and
``migrate_session`` reads that dump back to an equal session. ``version`` belongs to the store;
a turn never changes it. Ids the engine mints (runs, suspension order) come from ``seq``, a
counter kept in the session, so a replay of the same inputs mints the same ids.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter

from engine.clock import to_utc
from engine.records import record

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
    """Why a run is parked: the wake ``key`` that resumes it, and when or what it waits for.

    Frozen: a turn replaces it, never edits it, so a session's copy can share it."""

    model_config = ConfigDict(frozen=True)

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
    """A record that something already happened here: a flow start or a ``once`` say.

    Frozen, like ``Waiting``: a new claim replaces the old one."""

    model_config = ConfigDict(frozen=True)

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


_ANY_DICT: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
M = TypeVar("M", bound=BaseModel)


def _values(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` rebuilt the way ``model_dump`` rebuilds a ``dict[str, Any]`` field: every
    nested dict, list, tuple and set is new; strings, numbers and other objects are shared.
    A dict holding only strings, numbers, booleans and None (the usual ``data``) is copied as it
    is, which is what the serializer gives for it, in under half the time (1,000 fields: 18 µs
    to check and copy, against 42 µs)."""
    if not value:
        return {}
    return value.copy() if _flat(value) else _ANY_DICT.dump_python(value)


_IMMUTABLE = frozenset({str, int, float, bool, type(None)})


def _flat(value: dict[str, Any]) -> bool:
    """Whether every value of ``value`` is a str, int, float, bool or None (exactly those
    types): values no turn can write into, which a copy may share."""
    for item in value.values():
        if type(item) not in _IMMUTABLE:
            return False
    return True


def _detached(value: dict[str, Any]) -> dict[str, Any]:
    """``_values`` for a dict validation has just built: validation made the dict new, so when
    it holds no container it is already what ``_values`` would make of it."""
    return value if not value or _flat(value) else _ANY_DICT.dump_python(value)


# Setters of the four slots every pydantic model instance has: a copy fills them directly.
_SET_DICT = BaseModel.__dict__["__dict__"].__set__
_SET_FIELDS_SET = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_SET_EXTRA = BaseModel.__dict__["__pydantic_extra__"].__set__
_SET_PRIVATE = BaseModel.__dict__["__pydantic_private__"].__set__


def _new(cls: type[M], values: dict[str, Any]) -> M:
    """A ``cls`` holding ``values``, built without validation (the values are already valid),
    every field counted as set, as validating a full dump leaves it."""
    model = object.__new__(cls)
    _SET_DICT(model, values)
    _SET_FIELDS_SET(model, set(cls.model_fields))
    _SET_EXTRA(model, None)
    _SET_PRIVATE(model, None)
    return model


_RUN_FIELDS = frozenset(Run.model_fields)
_RUN_FIELDS_SET = set(_RUN_FIELDS)  # copied, never handed out: each run gets its own set
_SESSION_FIELDS = frozenset(Session.model_fields)


class _Reshaped(Exception):
    """The session is not as validation leaves one; copy it by the round trip instead."""


def copy_session(session: Session) -> Session:
    """A deep copy of ``session`` that shares nothing a turn writes.

    Equal to ``Session.model_validate(session.model_dump())``, the round trip this replaces,
    at a fraction of its cost: the session and its runs are new objects; their lists and dicts
    are new, and the values in ``data``, ``metadata`` and run ``input`` are rebuilt as
    ``model_dump`` rebuilds them. The frozen ``Waiting`` and ``Claim`` records and the times
    are shared: nothing edits them (so their ``model_fields_set`` is the caller's; the
    session's and the runs' count every field, as after the round trip). A session edited by
    hand into a shape validation would change (a time not in UTC, a run or claim given as a
    dict) takes the round trip, which normalises it or raises as it did.
    """
    try:
        return _copy(session)
    except (_Reshaped, AttributeError):  # AttributeError: a record of another shape
        return Session.model_validate(session.model_dump())


def _copy(session: Session) -> Session:
    # One pass, inlined, its names bound locally: this runs once per live run on every turn
    # given a Session, and the per-run cost is what a session of many parked runs pays.
    if type(session) is not Session or session.__pydantic_extra__ or session.__pydantic_private__:
        raise _Reshaped
    for at in (session.last_user_at, session.last_assistant_at):
        if at is not None and at.tzinfo is not UTC:
            raise _Reshaped
    new, run_type, utc = object.__new__, Run, UTC
    set_dict, set_fields, set_extra, set_private = (
        _SET_DICT, _SET_FIELDS_SET, _SET_EXTRA, _SET_PRIVATE
    )
    all_fields = _RUN_FIELDS_SET
    runs: list[Run] = []
    append = runs.append
    for run in session.runs:
        if type(run) is not run_type:  # (a Run has no extra or private values to carry over)
            raise _Reshaped
        values = run.__dict__.copy()
        waiting = values["waiting"]
        if values["started_at"].tzinfo is not utc or (
            waiting is not None and waiting.at is not None and waiting.at.tzinfo is not utc
        ):
            raise _Reshaped
        given = values["input"]
        values["input"] = _values(given) if given else {}
        values["asked"] = values["asked"].copy()
        copied = new(run_type)
        set_dict(copied, values)
        set_fields(copied, all_fields.copy())
        set_extra(copied, None)
        set_private(copied, None)
        append(copied)
    for claim in session.claims.values():
        if claim.at.tzinfo is not UTC:
            raise _Reshaped
    values = session.__dict__.copy()
    values["data"] = _values(session.data)
    values["metadata"] = _values(session.metadata)
    values["runs"] = runs
    values["claims"] = dict(session.claims)
    values["inputs"] = list(session.inputs)
    values["silence_wakes"] = dict(session.silence_wakes)
    return _new(Session, values)


def detach_values(session: Session) -> None:
    """Rebuild, in place, the values of ``data``, ``metadata`` and every run's ``input`` as
    ``copy_session`` does. For a session just validated from a caller's dict: validation builds
    new containers for the session's own fields but keeps the values inside ``Any`` fields by
    reference, so without this a turn writing into a nested value would write the caller's.
    Every field of the session and its runs then counts as set, as after a round trip."""
    fields = session.__dict__
    fields["data"] = _detached(session.data)
    fields["metadata"] = _detached(session.metadata)
    if len(session.__pydantic_fields_set__) != len(_SESSION_FIELDS):  # a full dump has all
        _SET_FIELDS_SET(session, set(_SESSION_FIELDS))
    for run in session.runs:
        if run.input:
            run.__dict__["input"] = _detached(run.input)
        if len(run.__pydantic_fields_set__) != len(_RUN_FIELDS):
            _SET_FIELDS_SET(run, set(_RUN_FIELDS))


def fresh_session(session_id: str) -> Session:
    """A session no turn has touched yet: ``Session(id=session_id)``, built without validating
    (as ``engine.records`` builds a turn's own records) when the id is a str, as every
    validated request's is."""
    if type(session_id) is not str:
        return Session(id=session_id)
    values = {
        "id": session_id,
        "v": 4,
        "version": 0,
        "data": {},
        "runs": [],
        "claims": {},
        "inputs": [],
        "metadata": {},
        "last_user_at": None,
        "last_assistant_at": None,
        "seq": 0,
        "silence_wakes": {},
    }
    return record(Session, values, {"id"})


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


def _check_old_shape(data: dict[str, Any]) -> None:
    """``ValueError`` naming the field when an older session's ``claims``, ``runs`` or
    ``inputs`` is not the kind of value the upgrade reads: a stored row that was damaged is
    then refused like any invalid session (a ``TurnRequestError`` in a turn), not a
    ``TypeError`` out of the upgrade."""
    claims, runs, inputs = data.get("claims"), data.get("runs"), data.get("inputs")
    if claims is not None and not isinstance(claims, dict):
        raise ValueError("claims must be an object")
    if runs is not None and not (isinstance(runs, list) and all(isinstance(r, dict) for r in runs)):
        raise ValueError("runs must be a list of objects")
    if inputs is not None and not isinstance(inputs, list):
        raise ValueError("inputs must be a list")


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
    _check_old_shape(data)
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
