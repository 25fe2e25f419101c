"""Recording the model's side of a turn, so the turn can be replayed later without the model.

A host that wants to replay its turns later must keep what the engine cannot recompute: the
time the turn ran at and what the model answered. ``recorded_agent`` gives an agent whose
clock and provider write into the ``Tape`` opened by ``taping()`` around a turn:

    agent = recorded_agent(agent)
    with taping(level="envelopes") as tape:
        result = await agent.turn(request)
    tape.to_json()   # {"at": ..., "calls": [...]} stored with the turn

The tape lives in a context variable, so one agent serves many turns at once (each task sees
its own tape) and a turn run outside ``taping()`` records nothing. A recording is never allowed
to fail a turn. ``level``:

    off         nothing about the calls (the turn's time is still kept: it is not personal)
    envelopes   per call its kind, the parsed reply (JSON envelope, text, tool calls), tokens
                (with the prompt tokens read from the server's prompt cache, where it says),
                latency and failure kind
    prompts     the same, plus the prompt sent (system text, messages, offered tool names)
"""

from __future__ import annotations

import hashlib
import json
import time
from contextlib import AbstractContextManager
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, Self, TypeVar

from engine.agent_config import AgentConfig
from engine.clock import Clock, to_utc
from engine.errors import ProviderError, UnusableReply
from engine.providers.base import ModelRequest, ModelResponse, Provider, ProviderHooks

RecordingLevel = Literal["off", "envelopes", "prompts"]
RECORDING_LEVELS: tuple[RecordingLevel, ...] = ("off", "envelopes", "prompts")
TAPE_VERSION = 1
_ERROR_LIMIT = 300


@dataclass
class Tape:
    """What one turn's clock and model calls said, in call order."""

    level: RecordingLevel
    at: datetime | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)
    # The clock's last reading after ``at``: when the turn's reply was final (Settle reads it
    # for ``last_assistant_at``). A replay gives the turn this reading back.
    spoke_at: datetime | None = None
    # The session the turn left (``note_session``), kept as its digest: a replay that departs
    # from the recording at this turn can tell whether the next turn starts from the same state.
    session: Any = None

    def to_json(self, session: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The calls as stored with the turn; None when the level keeps nothing.

        ``session`` is the JSON form of the session the turn left (what ``model_dump(mode=
        "json")`` of the noted one gives), for a host that has dumped it already to save it:
        the digest is taken from it instead of dumping the session a second time, which costs
        a turn about as much as the digest itself."""
        if self.level == "off":
            return None
        out: dict[str, Any] = {"v": TAPE_VERSION, "level": self.level, "calls": list(self.calls)}
        if self.spoke_at is not None and self.spoke_at != self.at:
            out["spoke_at"] = self.spoke_at.isoformat().replace("+00:00", "Z")
        dump = getattr(self.session, "model_dump", None)
        if callable(dump):
            out["state"] = state_digest(session if session is not None else dump(mode="json"))
        return out


_DIGEST_TEXT = json.JSONEncoder(
    sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str, check_circular=False
)
"""What ``json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
default=str)`` writes (the digests already stored were taken over that text), with one encoder
for every turn instead of one built per call, and without the check for a value that contains
itself, which a JSON form dumped from a model cannot: about a quarter less time a turn."""


def state_digest(session: Any) -> str:
    """A digest of the state a turn left, in its JSON form: equal digests, equal state for the
    next turn to start from. The ``version`` is left out: the host numbers saves, not the
    engine. Recorded with each turn (``state``), never the state itself."""
    if isinstance(session, dict):
        body = dict(session)
        body.pop("version", None)
    else:
        body = session
    text = _DIGEST_TEXT.encode(body)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def note_session(session: Any) -> None:
    """Keep the session a turn left on the open tape (the engine calls it as a turn returns);
    nothing without a tape or at level ``off``."""
    tape = _CURRENT.get()
    if tape is not None and tape.level != "off":
        tape.session = session


_CURRENT: ContextVar[Tape | None] = ContextVar("turnflow_tape", default=None)


class _Taping:
    """``taping()``'s block: a plain context manager, since the consumer opens one every turn
    and a generator-based one costs about a microsecond more."""

    __slots__ = ("_level", "_token")

    def __init__(self, level: RecordingLevel) -> None:
        self._level: RecordingLevel = level
        self._token: Token[Tape | None] | None = None

    def __enter__(self) -> Tape:
        tape = Tape(level=self._level)
        self._token = _CURRENT.set(tape)
        return tape

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None


def taping(level: RecordingLevel = "envelopes") -> AbstractContextManager[Tape]:
    """Open a tape for the turn(s) awaited inside the block, in this task only."""
    return _Taping(level)


def recording_level() -> RecordingLevel | None:
    """The level of the tape open in this task (None outside ``taping()``): what a host may keep
    of the calls made now, so an observer of the calls (a trace) keeps no more than that."""
    tape = _CURRENT.get()
    return None if tape is None else tape.level


def reply_json(response: ModelResponse) -> dict[str, Any]:
    """A reply as stored: its JSON envelope, free text and tool calls (empty parts left out)."""
    out: dict[str, Any] = {}
    if response.json is not None:
        out["json"] = response.json
    if response.text:
        out["text"] = response.text
    if response.tool_calls:
        out["tool_calls"] = [call.model_dump(mode="json") for call in response.tool_calls]
    return out


def prompt_json(request: ModelRequest) -> dict[str, Any]:
    """The prompt as stored at level ``prompts``: system text, messages and offered tools."""
    return {
        "system": request.system,
        "messages": [m.model_dump(mode="json", exclude_defaults=True) for m in request.messages],
        "tools": [tool.name for tool in request.tools],
    }


class RecordingProvider:
    """Wraps a provider; each call made inside ``taping()`` is written to the open tape."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner

    @property
    def hooks(self) -> ProviderHooks | None:
        """The wrapped provider's hooks, so call metrics still find them."""
        hooks = getattr(self.inner, "hooks", None)
        return hooks if isinstance(hooks, ProviderHooks) else None

    async def generate(self, request: ModelRequest) -> ModelResponse:
        tape = _CURRENT.get()
        if tape is None or tape.level == "off":
            return await self.inner.generate(request)
        started = time.perf_counter()
        entry: dict[str, Any] = {"kind": request.schema_name}
        if tape.level == "prompts":
            entry["prompt"] = prompt_json(request)
        try:
            response = await self.inner.generate(request)
        except Exception as exc:
            kind = exc.kind if isinstance(exc, ProviderError) else "retryable"
            entry |= {"ok": False, "error_kind": kind, "error": str(exc)[:_ERROR_LIMIT]}
            if isinstance(exc, UnusableReply):  # answered, but not usably: read differently
                entry["unusable"] = True
            entry["latency_ms"] = round((time.perf_counter() - started) * 1000, 3)
            tape.calls.append(entry)
            raise
        entry["ok"] = True
        entry["reply"] = reply_json(response)
        entry["latency_ms"] = round((time.perf_counter() - started) * 1000, 3)
        if response.usage is not None:
            entry["input_tokens"] = response.usage.input_tokens
            entry["output_tokens"] = response.usage.output_tokens
            # Only where the server says: recordings of servers without a prompt cache (and
            # every one made before) keep their shape.
            if response.usage.cache_read_tokens is not None:
                entry["cache_read_tokens"] = response.usage.cache_read_tokens
        tape.calls.append(entry)
        return response


class RecordingClock:
    """Wraps a clock; the times a turn inside ``taping()`` reads are kept on its tape: the
    first as the turn's time (``at``), the last after it as ``spoke_at``."""

    def __init__(self, inner: Clock) -> None:
        self.inner = inner

    def now(self) -> datetime:
        value = self.inner.now()
        tape = _CURRENT.get()
        if tape is not None:
            if tape.at is None:
                tape.at = to_utc(value)
            else:
                tape.spoke_at = to_utc(value)
        return value


def fields_written(before: Any, after: Any) -> dict[str, Any]:
    """The session fields a turn set or changed (new value) or removed (None), from the
    session's JSON form before and after it."""
    old = before.get("data") if isinstance(before, dict) else None
    new = after.get("data") if isinstance(after, dict) else None
    old_data: dict[str, Any] = old if isinstance(old, dict) else {}
    new_data: dict[str, Any] = new if isinstance(new, dict) else {}
    written = {k: v for k, v in new_data.items() if k not in old_data or old_data[k] != v}
    written |= {k: None for k in old_data if k not in new_data}
    return written


class Replaceable(Protocol):
    """What ``recorded_agent`` needs of an agent (``engine.Agent`` is one): its configuration,
    and a copy with another clock and provider. A protocol, so this module, which ``Agent``
    uses, need not import it back."""

    @property
    def config(self) -> AgentConfig: ...

    def replaced(self, *, provider: Provider | None, clock: Clock | None = None) -> Self: ...


A = TypeVar("A", bound=Replaceable)


def recorded_agent(agent: A) -> A:
    """``agent`` with its clock and provider recording into the open tape (idempotent)."""
    config = agent.config
    clock = config.clock if isinstance(config.clock, RecordingClock) else RecordingClock(
        config.clock
    )
    provider = config.provider
    if provider is not None and not isinstance(provider, RecordingProvider):
        provider = RecordingProvider(provider)
    return agent.replaced(clock=clock, provider=provider)


__all__ = [
    "RECORDING_LEVELS",
    "RecordingClock",
    "RecordingLevel",
    "RecordingProvider",
    "Tape",
    "fields_written",
    "note_session",
    "prompt_json",
    "recorded_agent",
    "recording_level",
    "reply_json",
    "state_digest",
    "taping",
]
