"""What goes into a turn and what comes out of it.

``TurnRequest`` carries exactly one input kind (message, wake, event or start) plus what only the
host knows (session, history, context, silenced). ``TurnResult`` is the plan the host executes
after saving: messages to send, wakes to schedule, and a log of what happened.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from engine.errors import TurnRequestError
from engine.lifecycle.results import (
    GoalResult,
    HandoffNotice,
    LinkFixReport,
    Source,
    TaskResult,
    TurnOutcome,
    absent,
)
from engine.records import built
from engine.session import OptionalUtcDatetime, Session, migrate_session


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HistoryEntry(_Model):
    """One entry of the host's transcript, oldest first.

    Frozen: an entry is never edited once made (compaction makes new ones), so a turn shares
    the entries a host gives instead of copying each, and a host may give the same entries
    to many turns. The chat message built from an entry for the model is kept on it
    (``engine.history``), in a slot pydantic does not see: no field, never compared, dumped or
    copied (a copy, and so an entry made from it with another text, starts without one)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    __slots__ = ("_chat",)

    role: Literal["user", "assistant", "tool"]
    text: str
    at: datetime | None = None


class Silenced(_Model):
    """Nobody speaks this turn; ``understand`` keeps the understand call."""

    reason: str
    understand: bool = False


class Fallback(_Model):
    """The host answers this message without the model: it could not reach the model for
    longer than it holds a conversation (``reason`` says why, e.g. ``model-unavailable``).
    The turn records the message, makes no model call, and sends the agent's
    ``fallback_message``, else ``message`` (the host's own words)."""

    reason: str
    message: str
    # The runs in progress cannot continue (the agent version they started on can no longer
    # run): the turn ends each one (``version-gone``) before the fallback message. Such a
    # fallback may answer any input, a timer's wake included, so none is dropped in silence.
    end_runs: bool = Field(default=False, exclude_if=lambda v: v is False)


class StartInput(_Model):
    """A host start: run ``flow`` with ``input``; ``key`` identifies this start for replays."""

    flow: str
    input: dict[str, Any] = Field(default_factory=dict)
    key: str
    # Lifecycle: the flow_only skills this start loads for the conversation.
    skills: list[str] = Field(default_factory=list)


class ImageInput(_Model):
    """An image the customer sent with a message: a URL or base64 ``data``, with its media
    type. Which ones are read, and the size and count limits, are the lifecycle's (``images``)."""

    media_type: str = Field(min_length=1, max_length=100)
    url: str | None = None
    data: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ImageInput:
        if (self.url is None) == (self.data is None):
            raise ValueError("an image needs exactly one of url or data")
        if self.url is not None and not self.url.startswith(("https://", "http://")):
            raise ValueError("an image url must start with https:// or http://")
        return self


# Input ids of other kinds, recorded beside message ids in ``session.inputs``.
_OTHER_KIND_IDS = ("event:", "start:")


def check_message_id(value: str | None) -> str | None:
    """A message ``id`` as given, or ``ValueError``: an empty id would be recorded as an id
    and make every later id-less-looking message of the conversation a duplicate, and one
    that starts with ``event:`` or ``start:`` could be taken for an event's or a start's key."""
    if value is None:
        return None
    if not value:
        raise ValueError("a message id must not be empty (leave it out instead)")
    if value.startswith(_OTHER_KIND_IDS):
        raise ValueError("a message id must not start with event: or start:")
    return value


class BurstMessage(_Model):
    """An earlier message of a burst: sent before the request's own ``message``, answered in
    the same turn. ``id`` and ``at`` mean what the request's own do."""

    message: str
    id: str | None = None
    at: OptionalUtcDatetime = None

    @field_validator("id")
    @classmethod
    def _message_id(cls, value: str | None) -> str | None:
        return check_message_id(value)


_BURST_GIVEN = frozenset(BurstMessage.model_fields)  # a burst part gives every field


def _burst_message(message: str, id: str | None, at: datetime | None) -> BurstMessage:
    """``BurstMessage(message=..., id=..., at=...)`` from a request's own (validated) fields,
    built as ``engine.records`` builds a turn's own records: a turn reads ``parts`` several
    times. A value validation would still convert (a time not in UTC, set on a request built
    without validation) takes the validated construction."""
    values = {"message": message, "id": id, "at": at}
    return built(BurstMessage, values, _BURST_GIVEN, validate=not _as_validated(message, id, at))


def _as_validated(message: Any, id: Any, at: Any) -> bool:
    """Whether a request's own ``message``, ``id`` and ``at`` are as validation leaves them
    (so ``_burst_message`` builds its part without validating, and keeps ``message`` as is)."""
    return type(message) is str and (id is None or type(id) is str) and (
        at is None or (type(at) is datetime and at.tzinfo is UTC)
    )


def message_texts(request: TurnRequest) -> list[str]:
    """``[part.message for part in request.parts]``: the turn's customer messages, oldest
    first. A prompt reads them on every model call; a lone message (no burst) is given as it
    is, without building the ``BurstMessage`` that ``parts`` makes for it each time."""
    message = request.message
    if message is None:
        return []
    if not request.burst and _as_validated(message, request.id, request.at):
        return [message]
    return [part.message for part in request.parts]


InputKind = Literal["message", "wake", "event", "start"]


class TurnRequest(_Model):
    """One turn's input. Exactly one of ``message``, ``wake``, ``event``, ``start``."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    session_id: str
    message: str | None = None
    id: str | None = None
    at: OptionalUtcDatetime = None
    wake: str | None = None
    event: str | None = None
    payload: dict[str, Any] = Field(default_factory=dict)
    key: str | None = None
    direction: Literal["inbound", "outbound"] = "inbound"
    start: StartInput | None = None
    # Earlier messages answered in this turn with ``message`` (oldest first): a customer who
    # sends several messages before the first is answered gets one reply to all of them.
    burst: list[BurstMessage] = Field(default_factory=list, exclude_if=absent)
    session: Session | None = None
    history: list[HistoryEntry] = Field(default_factory=list)
    context: dict[str, Any] = Field(default_factory=dict)
    silenced: Silenced | None = None
    # With a message only. An entry that is not a valid image stays a dict: the lifecycle
    # refuses that image with a reason and the message itself is still answered.
    images: list[ImageInput | dict[str, Any]] = Field(default_factory=list)
    # With a message (or any input when it ends the runs): the host answers without the model
    # (see ``Fallback``).
    fallback: Fallback | None = Field(default=None, exclude_if=absent)
    # Parked runs renamed before the turn: ``{"old_flow/old_step": "new_flow/new_step"}``
    # (engine.phases.migrate), from a host moving the conversation to a new agent version.
    migrate_runs: dict[str, str] = Field(default_factory=dict, exclude_if=absent)

    @field_validator("id")
    @classmethod
    def _message_id(cls, value: str | None) -> str | None:
        return check_message_id(value)

    @field_validator("session", mode="before")
    @classmethod
    def _session(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return migrate_session(value)
        return value

    @field_validator("migrate_runs")
    @classmethod
    def _migrate_runs(cls, value: dict[str, str]) -> dict[str, str]:
        for old, new in value.items():
            for given in (old, new):
                flow, slash, step = given.partition("/")
                if not (flow and slash and step):
                    raise ValueError(f"migrate_runs: {given!r} is not flow/step")
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> TurnRequest:
        given = [k for k in ("message", "wake", "event", "start") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"exactly one of message, wake, event, start; got {given or 'none'}")
        if self.event is not None and not self.key:
            raise ValueError("an event needs a key")
        if self.images and self.message is None:
            raise ValueError("images come only with a message")
        if self.burst and self.message is None:
            raise ValueError("a burst comes with a message: its last")
        if self.fallback is not None and self.message is None and not self.fallback.end_runs:
            raise ValueError("a fallback answers a message")
        return self

    @property
    def kind(self) -> InputKind:
        if self.message is not None:
            return "message"
        if self.wake is not None:
            return "wake"
        if self.event is not None:
            return "event"
        return "start"

    @property
    def input_id(self) -> str | None:
        """The id recorded in ``session.inputs`` to drop replays."""
        if self.message is not None:
            return self.id
        if self.wake is not None:
            return None  # a replayed wake finds nothing waiting on it: stale-wake
        if self.event is not None:
            return f"event:{self.key}"
        assert self.start is not None
        return f"start:{self.start.key}"

    @property
    def parts(self) -> list[BurstMessage]:
        """Every customer message of the turn, oldest first: the burst, then ``message``
        (empty for other kinds)."""
        if self.message is None:
            return []
        return [*self.burst, _burst_message(self.message, self.id, self.at)]

    @property
    def input_ids(self) -> list[str]:
        """Every id this turn records in ``session.inputs``: a burst's ids, then its own."""
        if self.burst:
            return [p.id for p in self.parts if p.id is not None]
        own = self.input_id
        return [] if own is None else [own]

    @property
    def text(self) -> str | None:
        """The customer's words of this turn: the message, or a burst's messages one per
        line; None for other kinds."""
        if self.message is None:
            return None
        return "\n".join(message_texts(self))

    def only(self, parts: list[BurstMessage]) -> TurnRequest:
        """This message request narrowed to ``parts`` (non-empty, oldest first): the last
        becomes ``message``, the others the burst."""
        last = parts[-1]
        return self.model_copy(
            update={"message": last.message, "id": last.id, "at": last.at, "burst": parts[:-1]}
        )

    @classmethod
    def parse(cls, value: TurnRequest | dict[str, Any]) -> TurnRequest:
        """Validate a dict (or pass a request through), raising ``TurnRequestError``."""
        if isinstance(value, TurnRequest):
            return value
        try:
            return cls.model_validate(value)
        except ValidationError as exc:
            sid = value.get("session_id") if isinstance(value, dict) else None
            first = exc.errors(include_url=False, include_input=False)[0]
            where = ".".join(str(part) for part in first["loc"])
            raise TurnRequestError(
                f"invalid turn request: {where + ': ' if where else ''}{first['msg']}",
                session_id=sid if isinstance(sid, str) else None,
            ) from None


class Message(_Model):
    """A message to send, in emission order. ``after_ms`` is an inline delay before it."""

    kind: Literal["ai", "verbatim", "handoff"]
    text: str
    key: str
    after_ms: int = 0
    run_id: str | None = None
    step_id: str | None = None
    # Lifecycle (opt-in): the hand-off a ``handoff`` message carries; the sources an ``ai``
    # reply used (at most 8); the agent that sent it (every message of a lifecycle agent).
    handoff: HandoffNotice | None = Field(default=None, exclude_if=absent)
    provenance: list[Source] = Field(default_factory=list, exclude_if=absent)
    agent_id: str | None = Field(default=None, exclude_if=absent)


class ScheduleEntry(_Model):
    """A wake to deliver at ``at``; ``replaces`` names the wake it supersedes."""

    key: str
    at: datetime
    replaces: str | None = None


class Outcome(_Model):
    """One line of what happened, with the model calls it spent."""

    code: str
    run_id: str | None = None
    flow_id: str | None = None
    step_id: str | None = None
    status: str | None = None
    detail: str | None = None
    llm_calls: int = 0
    # Lifecycle (opt-in): the AI credits of the turn, on its ``billed`` line.
    credits: int | None = Field(default=None, exclude_if=lambda value: value is None)


class RunChange(_Model):
    """A run that started or ended this turn, and why."""

    run_id: str
    flow_id: str
    reason: str


class Skip(_Model):
    """A trigger that matched but did not start its flow."""

    flow_id: str
    code: str
    detail: str | None = None


class TurnResult(_Model):
    """The turn's plan: save ``session``, then send ``messages`` and schedule ``schedule``."""

    session: Session
    changed: bool
    messages: list[Message] = Field(default_factory=list)
    schedule: list[ScheduleEntry] = Field(default_factory=list)
    outcomes: list[Outcome] = Field(default_factory=list)
    started: list[RunChange] = Field(default_factory=list)
    ended: list[RunChange] = Field(default_factory=list)
    skipped: list[Skip] = Field(default_factory=list)
    llm_calls: int = 0
    # Lifecycle (opt-in): answered | goal_completed | task_completed | handoff | fallback |
    # error | gated (None when the turn said nothing); what the link check changed; what
    # complete_task returned.
    turn_outcome: TurnOutcome | None = Field(default=None, exclude_if=absent)
    link_fixes: list[LinkFixReport] = Field(default_factory=list, exclude_if=absent)
    task_result: TaskResult | None = Field(default=None, exclude_if=absent)
    goal_result: GoalResult | None = Field(default=None, exclude_if=absent)
    # Lifecycle (opt-in): the AI credits this turn costs (0 for gated, fallback, error turns).
    credits: int | None = Field(default=None, exclude_if=lambda value: value is None)
