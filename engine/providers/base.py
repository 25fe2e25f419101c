"""The provider protocol: the only door through which the engine talks to a model.

A provider turns one ``ModelRequest`` into one ``ModelResponse``. It never decides anything; the
engine counts every ``generate`` call in ``llm_calls``. Failures are raised as
``ProviderError(kind="retryable"|"fatal")``; anything else a provider raises is treated by the
engine as retryable.

``ModelRequest.meta`` is a structured view of what the prompt says (flow phrases, field specs,
the step prompt, ...). Real providers ignore it; the offline ``RuleProvider`` and tests read it so
they need not parse prose. Its keys are documented on the field.

``ProviderHooks`` lets a host observe calls (duration, tokens) without the engine importing any
metrics library.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from engine.errors import ProviderError

SchemaName = Literal["understand", "speak", "compact", "skills", "vision"]


class ImagePart(BaseModel):
    """An image a user message carries to a vision-capable model: a URL or base64 ``data``."""

    model_config = ConfigDict(frozen=True)

    media_type: str
    url: str | None = None
    data: str | None = None

    def data_url(self) -> str:
        """The image as one URL: its own, or a ``data:`` URL of the inline bytes."""
        return self.url or f"data:{self.media_type};base64,{self.data or ''}"


class ChatMessage(BaseModel):
    """One entry of the conversation sent to the model.

    ``role`` "tool" carries a tool result (``tool_call_id`` set); an assistant entry may carry
    the ``tool_calls`` it made; a user entry may carry ``images`` for a vision call.
    """

    model_config = ConfigDict(frozen=True)

    role: Literal["user", "assistant", "tool", "system"]
    text: str = ""
    tool_call_id: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    images: list[ImagePart] = Field(default_factory=list)  # user messages only


class ToolSpec(BaseModel):
    """A tool offered to the model: name, description and JSON schema of its arguments."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolCall(BaseModel):
    """A tool call the model asked for."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ModelRequest(BaseModel):
    """One model call.

    ``json_schema`` is the envelope the reply must fit (every property required and nullable).
    ``meta`` keys, by ``schema_name``:
      understand: ``flows`` {id: [phrases]}, ``mentions`` {id: [phrases]},
                  ``branches`` {alias: question}, ``fields`` {name: field spec dict},
                  ``extract`` {mention flow id: {param: field spec dict}}, ``message`` str,
                  ``messages`` [str]
      speak:      ``prompt`` str | None, ``pending`` {name: field spec dict}, ``known`` dict,
                  ``message`` str | None, ``messages`` [str], ``agent_name`` str,
                  ``already_sent`` [str], ``retry`` bool
      compact:    ``entries`` int
    ``message`` is the customer's words of the turn (a burst's messages one per line);
    ``messages`` the same one message at a time, oldest first (empty on other turns).
    """

    model_config = ConfigDict(frozen=True)

    schema_name: SchemaName
    system: str
    messages: list[ChatMessage] = Field(default_factory=list)
    json_schema: dict[str, Any] = Field(default_factory=dict)
    tools: list[ToolSpec] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict)
    turn_sections_at: int | None = None
    """Where in ``system`` this turn's own sections start (None: nowhere). What comes before is
    fixed for the agent version and is sent as the system prompt; the rest is sent after the
    conversation's messages (``laid_out``), so the start of every prompt of one agent, and of
    one conversation from call to call, repeats byte for byte for a server's prefix cache."""
    prefix: str | None = Field(default=None, exclude=True)
    """The text fixed for the agent version that every call kind of a conversation shares
    (identity, knowledge, the understand task and its topics; None: not said). Only the
    append-only layout sends it (``engine.providers.transcript``), as the one system prompt of
    both call kinds; the other layouts send ``system`` as they always have. Never dumped: a
    recording keeps the request as built, and the agent version gives this text again."""
    conversation: str | None = None
    """The session the call is for (None: not said). Never sent as is: a llama.cpp provider
    with slot affinity picks the server slot from its digest (``engine.providers.slots``)."""


class LaidOut(NamedTuple):
    """A request in prefix-cache order (``laid_out``): ``system`` is the part fixed for the
    agent; ``turn`` (this turn's own sections, "" when none) goes, as a system entry, before
    ``messages[turn_at:]`` (the customer's words not yet answered and this call's tool rounds),
    after the rest of the history ``messages[:turn_at]``."""

    system: str
    messages: list[ChatMessage]
    turn: str
    turn_at: int


def _turn_messages_start(messages: list[ChatMessage]) -> int:
    """Where the entries the turn's sections are about start in ``messages``: before the tool
    rounds of this call (assistant tool calls and tool results at the end) and before the
    customer's words not yet answered (the user entries right before them: this turn's
    messages, or on a retry the message an earlier attempt failed to answer)."""
    at = len(messages)
    while at and (messages[at - 1].role == "tool" or messages[at - 1].tool_calls):
        at -= 1
    while at and messages[at - 1].role == "user":
        at -= 1
    return at


def laid_out(request: ModelRequest) -> LaidOut:
    """``request`` in prefix-cache order: the fixed part of ``system`` (the system prompt);
    the history; this turn's sections, still as system text, right before the customer's words
    not yet answered; then those words and this call's tool rounds. The model reads the same
    instructions in the same role as in the prompt as built, and the customer's words stay the
    last user entry, while everything before the turn's sections repeats from call to call of
    one conversation (and the system prompt across conversations). Without
    ``turn_sections_at``: ``system`` and ``messages`` as they are, no turn part."""
    at = request.turn_sections_at
    messages = request.messages
    if at is None or not 0 <= at <= len(request.system):
        return LaidOut(request.system, messages, "", len(messages))
    head, turn = request.system[:at].rstrip(), request.system[at:].strip()
    return LaidOut(head, messages, turn, _turn_messages_start(messages))


class Usage(BaseModel):
    """Token counts when the API reports them.

    ``input_tokens`` is the whole prompt, whatever part of it the server read from its prompt
    cache: the Messages API counts cached tokens apart (a 19-token prompt with 18 cached reports
    ``input_tokens: 1``), so its provider adds them back. ``cache_read_tokens`` and
    ``cache_write_tokens`` say how much of that prompt was read from or written to the cache,
    None when the API does not say.
    """

    model_config = ConfigDict(frozen=True)

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None


class ModelResponse(BaseModel):
    """What the model answered: free text, the parsed JSON envelope (or None), tool calls."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    text: str = ""
    # Stored as ``json_`` because ``BaseModel.json`` exists; built and read as ``json``.
    json_: dict[str, Any] | None = Field(default=None, alias="json")
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage | None = None
    model: str | None = None
    """The model that answered, as the API names it (it may be more exact than the one asked
    for); None when the API does not say."""

    @property
    def json(self) -> dict[str, Any] | None:  # type: ignore[override]  # the spec's field name
        return self.json_


@runtime_checkable
class Provider(Protocol):
    """Anything with ``async generate(request) -> ModelResponse``."""

    async def generate(self, request: ModelRequest) -> ModelResponse: ...


class CallRecord(BaseModel):
    """What a provider reports to its hooks after each call.

    ``model`` is the model asked for (None for a provider without one: rules, mocks);
    ``error_type`` the class name of what the call raised. ``request`` and ``response`` are the
    call's own objects, so a host may record the prompt and the reply where its settings allow
    it (the engine neither keeps nor sends them anywhere)."""

    model_config = ConfigDict(frozen=True)

    provider: str
    schema_name: str
    duration_s: float
    ok: bool
    error_kind: str | None = None
    usage: Usage | None = None
    model: str | None = None
    error_type: str | None = None
    request: ModelRequest | None = None
    response: ModelResponse | None = None


ProviderHook = Callable[[CallRecord], None]


class ProviderHooks:
    """A list of callbacks called after every model call; a failing hook never fails the call."""

    def __init__(self, hooks: list[ProviderHook] | None = None) -> None:
        self._hooks: list[ProviderHook] = list(hooks or [])

    def add(self, hook: ProviderHook) -> None:
        self._hooks.append(hook)

    def emit(self, record: CallRecord) -> None:
        for hook in self._hooks:
            try:
                hook(record)
            except Exception:  # observing must never break a turn
                pass


ChatMessage.model_rebuild()

__all__ = [
    "CallRecord",
    "ChatMessage",
    "LaidOut",
    "ModelRequest",
    "ModelResponse",
    "Provider",
    "ProviderError",
    "ProviderHook",
    "ProviderHooks",
    "SchemaName",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "laid_out",
]
