"""The agent's configuration as pydantic models: fields, flows, triggers, steps, moves.

Every model accepts the plain dicts of ``engine.md`` (``if``/``else``/``with`` are aliases of
``if_``/``else_``/``with_``). Shape is checked here; cross-references (a step naming a field, a
move naming a step, ...) are checked in ``validate_agent`` so that a bad name fails when the
agent is built, never on the turn that first reaches it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from datetime import date
from typing import Annotated, Any, Literal, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from engine.coercion import coerce_kind
from engine.errors import FlowConfigurationError

FieldType = Literal["string", "number", "integer", "boolean", "date", "datetime", "email"]
# A condition is a callable ``fn(ctx) -> bool`` or a one-key dict (see conditions.py).
Condition = Any

M = TypeVar("M", bound=BaseModel)

BUILTIN_CONDITIONS = frozenset({"known", "missing", "equals", "all", "any", "not"})

# The longest time a setting in milliseconds may name (a wait, a silence, a delay, a cooldown):
# ten years. A turn adds it to the current time, and a datetime stops at year 9999, so a bigger
# value would fail every turn that reaches it (OverflowError) instead of the build.
MAX_DURATION_MS = 10 * 365 * 24 * 60 * 60 * 1000


def _at_most_max_duration(value: int) -> int:
    if value > MAX_DURATION_MS:
        raise ValueError(f"{value} ms is longer than 10 years (at most {MAX_DURATION_MS})")
    return value


DurationMs = Annotated[int, AfterValidator(_at_most_max_duration)]


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True, populate_by_name=True, extra="forbid", arbitrary_types_allowed=True
    )


class FieldSpec(_Model):
    """A field the agent collects: its type, allowed values and how to ask for it."""

    type: FieldType = "string"
    enum: list[Any] | None = None
    ask: str | None = None
    description: str | None = None
    extract: Literal["step", "anywhere"] = "step"
    max_asks: int = Field(default=3, ge=1)
    # Offered again, once known, to understand calls made anyway while a run of a flow that
    # collects it holds the floor: the customer may change it ("actually, saturday").
    correctable: bool = False

    @field_validator("enum")
    @classmethod
    def _enum_fits_type(cls, value: list[Any] | None, info: ValidationInfo) -> list[Any] | None:
        """A value is checked against ``enum`` after coercion, so a member coercion would not give
        back unchanged (``"1"`` for an integer, ``"yes"`` for a boolean) could never match."""
        kind = info.data.get("type")
        if value is None or kind is None:  # a bad type is reported on its own
            return value
        for member in value:
            try:
                fitted = coerce_kind(kind, member)
            except (ValueError, TypeError, OverflowError):  # as engine.values.coerce's bad-value
                raise ValueError(f"{member!r} is not a value of type {kind}") from None
            if fitted != member or type(fitted) is not type(member):
                raise ValueError(
                    f"{member!r} is stored as {fitted!r} in a field of type {kind}: "
                    f"write {fitted!r}"
                )
        return value


class StepMove(_Model):
    """Go to a step, clearing some fields first."""

    step: str
    clear: list[str] = Field(default_factory=list)


class FlowMove(_Model):
    """End this run and start a child run of another flow with ``input``."""

    flow: str
    input: dict[str, Any] = Field(default_factory=dict)


Move = str | StepMove | FlowMove


# --- triggers ----------------------------------------------------------------------------------


class MessageTrigger(_Model):
    """``{"message": [phrases]}``: scored by the understand call; ``[]`` is a catch-all."""

    message: list[str]
    if_: Condition | None = Field(default=None, alias="if")


class MentionTrigger(_Model):
    """``{"mention": [phrases]}``: judged by the understand call; ``[]`` is a code-only detector."""

    mention: list[str]
    extract: dict[str, FieldSpec] = Field(default_factory=dict)
    if_: Condition | None = Field(default=None, alias="if")


class EventTrigger(_Model):
    """``{"event": name}``: starts the flow when the event arrives; ``after_ms`` delays it."""

    event: str
    if_: Condition | None = Field(default=None, alias="if")
    after_ms: DurationMs | None = Field(default=None, ge=0)


class SilenceTrigger(_Model):
    """``{"silence": ms}``: starts the flow when the customer stays silent that long."""

    silence: DurationMs = Field(gt=0)
    if_: Condition | None = Field(default=None, alias="if")


def _trigger_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        keys = value.keys()
    elif isinstance(value, BaseModel):
        keys = type(value).model_fields.keys()
    else:
        return None  # not a trigger at all: pydantic reports it at its place in ``on``
    for kind in ("message", "mention", "event", "silence"):
        if kind in keys:
            return kind
    return None


Trigger = Annotated[
    Annotated[MessageTrigger, Tag("message")]
    | Annotated[MentionTrigger, Tag("mention")]
    | Annotated[EventTrigger, Tag("event")]
    | Annotated[SilenceTrigger, Tag("silence")],
    Discriminator(_trigger_kind),
]


# --- steps -------------------------------------------------------------------------------------


class Branch(_Model):
    """A branch of a talk step: ``if`` is judged by code, ``when`` by the understand call."""

    if_: Condition | None = Field(default=None, alias="if")
    when: str | None = None
    then: Move


class TalkStep(_Model):
    """Speak: a prompt and/or fields to collect; ``question`` is fixed text with no call."""

    id: str
    prompt: str | None = None
    collect: list[str] = Field(default_factory=list)
    question: str | None = None
    branches: list[Branch] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)
    instructions: list[dict[str, Any]] = Field(default_factory=list)
    then: Move | None = None
    # Where the run goes when a correctable field changes while it asks here (else the
    # flow's ``on_correction``; neither: it stays and the new value simply stands).
    on_correction: Move | None = None


class SayStep(_Model):
    """Send fixed text (templated) verbatim; ``once`` sends it once per session."""

    id: str
    say: str
    once: bool = False
    then: Move | None = None


class DoStep(_Model):
    """Run a host action with templated ``with`` arguments."""

    id: str
    do: str
    with_: dict[str, Any] = Field(default_factory=dict, alias="with")
    then: Move | None = None
    on_fail: Move | None = None


class TimerWait(_Model):
    ms: DurationMs = Field(ge=0)


class EventWait(_Model):
    event: str
    up_to_ms: DurationMs | None = Field(default=None, gt=0)


def _wait_kind(value: Any) -> str:
    # Picked by key, like triggers and steps, so an error is reported against the wait the
    # author wrote ("up_to_ms" of an event wait), not "ms: Field required" of the timer one.
    if isinstance(value, EventWait) or (isinstance(value, dict) and "event" in value):
        return "EventWait"
    return "TimerWait"


# The tags are the class names, which ``_path`` leaves out of an error's location.
Wait = Annotated[
    Annotated[TimerWait, Tag("TimerWait")] | Annotated[EventWait, Tag("EventWait")],
    Discriminator(_wait_kind),
]


class WaitStep(_Model):
    """Park the run on a timer or an event."""

    id: str
    wait: Wait
    business_hours: bool = False
    then: Move | None = None
    else_: Move | None = Field(default=None, alias="else")


class IfStep(_Model):
    """Branch by code: ``then`` when the condition holds, ``else`` (default ``end``) otherwise."""

    id: str
    if_: Condition = Field(alias="if")
    then: Move
    else_: Move | None = Field(default=None, alias="else")


_STEP_KINDS: dict[type, str] = {}


def _step_kind(value: Any) -> str:
    if not isinstance(value, dict):
        return _STEP_KINDS.get(type(value), "talk")
    for kind in ("say", "do", "wait", "if"):
        if kind in value:
            return kind
    return "talk"


_STEP_KINDS.update({SayStep: "say", DoStep: "do", WaitStep: "wait", IfStep: "if"})
AnyStep = SayStep | DoStep | WaitStep | IfStep | TalkStep

Step = Annotated[
    Annotated[SayStep, Tag("say")]
    | Annotated[DoStep, Tag("do")]
    | Annotated[WaitStep, Tag("wait")]
    | Annotated[IfStep, Tag("if")]
    | Annotated[TalkStep, Tag("talk")],
    Discriminator(_step_kind),
]


class Cooldown(_Model):
    cooldown_ms: DurationMs = Field(ge=0)


def _repeat_kind(value: Any) -> str:
    # A dict can only be a cooldown: its error is then the cooldown's, not "should be 'always'".
    return "Cooldown" if isinstance(value, dict | Cooldown) else "Literal"


Repeat = Annotated[
    Annotated[Literal["always", "once"], Tag("Literal")] | Annotated[Cooldown, Tag("Cooldown")],
    Discriminator(_repeat_kind),
]


class Instruction(_Model):
    """``{"must"|"never"|"should": text, "if": condition?}``."""

    must: str | None = None
    never: str | None = None
    should: str | None = None
    if_: Condition | None = Field(default=None, alias="if")

    def text(self) -> str:
        for verb in ("must", "never", "should"):
            value = getattr(self, verb)
            if value:
                return f"{verb.upper()}: {value}"
        return ""


class Flow(_Model):
    """A small program: triggers that start it, steps it walks."""

    id: str
    name: str | None = None
    description: str | None = None
    on: list[Trigger] = Field(default_factory=list)
    steps: list[Step] = Field(min_length=1)
    when: Condition | None = None
    repeat: Repeat = "always"
    clear_on_start: list[str] = Field(default_factory=list)
    on_end: Literal["end", "stay"] = "end"
    instructions: list[Instruction] = Field(default_factory=list)
    on_correction: Move | None = None

    _positions: dict[str, int] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: Any, /) -> None:
        # First occurrence wins, as a scan would; duplicates are rejected by the agent anyway.
        for i, step in enumerate(self.steps):
            self._positions.setdefault(step.id, i)

    # step() and index() read _positions from the private-attribute slot directly: a turn
    # calls them at every step it walks, and ``self._positions`` goes through pydantic's
    # ``__getattr__`` fallback each time (about half the cost of the lookup).

    def step(self, step_id: str) -> AnyStep | None:
        """The step with this id, or None."""
        i = self.__pydantic_private__["_positions"].get(step_id)  # type: ignore[index]
        return None if i is None else self.steps[i]

    def index(self, step_id: str) -> int:
        """The step's position in ``steps``, or -1."""
        positions: dict[str, int] = self.__pydantic_private__["_positions"]  # type: ignore[index]
        return positions.get(step_id, -1)


class Action(_Model):
    """A do handler with the parameter names its ``with`` may use (empty: anything goes)."""

    handler: Callable[..., Any]
    params: dict[str, Any] = Field(default_factory=dict)

    def __init__(self, handler: Callable[..., Any] | None = None, /, **data: Any) -> None:
        # engine.md writes ``Action(handler, params={...})``: the handler may come positionally.
        if handler is not None:
            data["handler"] = handler
        super().__init__(**data)


class Tool(_Model):
    """A tool the model may call in a speak call."""

    description: str = ""
    parameters: Any = Field(default_factory=lambda: {"type": "object", "properties": {}})
    handler: Callable[..., Any]

    def json_schema(self) -> dict[str, Any]:
        params = self.parameters
        if inspect.isclass(params) and issubclass(params, BaseModel):
            return params.model_json_schema()
        return dict(params)


class IdleSpeaker(_Model):
    """The speaker with no run: a prompt and the tools it may use."""

    prompt: str | None = None
    tools: list[str] = Field(default_factory=list)


class CompactionConfig(_Model):
    """engine.md §8: code layers first, one summary call only when still too long."""

    keep_last: int = Field(default=40, ge=1)
    max_chars: int = Field(default=24000, ge=1)
    summarize: bool = True
    trim_entry_chars: int = Field(default=2000, ge=1)


_HOUR_MINUTE = re.compile(r"([01][0-9]|2[0-3]):[0-5][0-9]")


class BusinessHours(_Model):
    """Opening hours per weekday (``mon``..``sun`` -> ``[open, close]``) in ``tz``.

    Checked here because ``next_open`` reads them on every turn that reaches a business-hours
    wait: a time that is not ``HH:MM`` (00:00-23:59), or a window that does not open before it
    closes (no overnight windows), would fail or misplace each of those turns instead.
    """

    tz: str = "UTC"
    days: dict[Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"], tuple[str, str]] = Field(
        default_factory=dict
    )
    holidays: list[str] = Field(default_factory=list)

    @field_validator("tz")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except ZoneInfoNotFoundError:  # a KeyError, which pydantic would let escape as is
            raise ValueError(f"unknown time zone {value!r}") from None
        return value

    @field_validator("days")
    @classmethod
    def _windows(cls, value: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
        for day, (opens, closes) in value.items():
            for text in (opens, closes):
                if not _HOUR_MINUTE.fullmatch(text):
                    raise ValueError(f"{day}: {text!r} is not a time HH:MM from 00:00 to 23:59")
            if opens >= closes:  # zero-padded, so the text compares as the time does
                raise ValueError(f"{day}: opens at {opens}, not before it closes at {closes}")
        return value

    @field_validator("holidays")
    @classmethod
    def _iso_dates(cls, value: list[str]) -> list[str]:
        # Compared with date.isoformat(), so only that exact form (YYYY-MM-DD) ever matches.
        for text in value:
            try:
                canonical = date.fromisoformat(text).isoformat()
            except ValueError:
                canonical = None
            if canonical != text:
                raise ValueError(f"{text!r} is not a date YYYY-MM-DD")
        return value


def parse_model(
    model: type[M],
    value: Any,
    *,
    flow_id: str | None = None,
    flow_index: int | None = None,
    field: str | None = None,
    where: str | None = None,
) -> M:
    """Validate ``value`` into ``model`` or raise ``FlowConfigurationError`` naming where: the
    flow (id, else its index), the step (id, else its index), the field, the setting."""
    if isinstance(value, model):
        return value
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = list(error["loc"])
        raw = value if isinstance(value, dict) else {}
        if model is Flow and flow_id is None and isinstance(raw.get("id"), str):
            flow_id = raw["id"]
        step_id: str | None = None
        step_index: int | None = None
        if model is Flow and len(loc) >= 2 and loc[0] in ("steps", "on") and isinstance(
            loc[1], int
        ):
            items = raw.get(loc[0]) or []
            item = items[loc[1]] if loc[1] < len(items) else None
            kind = loc[2] if len(loc) >= 3 and isinstance(loc[2], str) else None
            if loc[0] == "steps":
                if isinstance(item, dict) and isinstance(item.get("id"), str):
                    step_id = item["id"]
                else:
                    step_index = loc[1]
                where = f"a {kind} step" if kind and step_id is None else where
                loc = loc[3:] if kind else loc[2:]
            else:
                where = f"trigger on[{loc[1]}]" + (f" ({kind})" if kind else "")
                loc = loc[3:] if kind else loc[2:]
            if len(loc) >= 2 and loc[0] == "extract" and isinstance(loc[1], str):
                field, loc = loc[1], loc[2:]
        path = _path(loc)
        raise FlowConfigurationError(
            f"{path}: {error['msg']}" if path else error["msg"],
            flow_id=flow_id,
            flow_index=flow_index if flow_id is None else None,
            step_id=step_id,
            step_index=step_index,
            field=field,
            where=where,
        ) from None


def _path(loc: list[Any]) -> str:
    """``wait.ms`` / ``collect[0]`` from a pydantic location, without the union members'
    class names pydantic inserts (``TimerWait``), which are no key an author wrote."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _is_model_name(part):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def _is_model_name(part: str) -> bool:
    if part == "Literal":  # the tag of repeat's "always" | "once"
        return True
    found = globals().get(part)
    return isinstance(found, type) and issubclass(found, BaseModel)
