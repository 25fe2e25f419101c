"""``OpenAIProvider``: any OpenAI-compatible chat-completions server (OpenAI, vLLM, Ollama,
LiteLLM, OpenRouter, ...), chosen by ``base_url``.

A request with a ``json_schema`` asks for structured output in the form ``json_mode`` names,
since servers speak different ones:

    json_schema          ``{"type": "json_schema", "json_schema": {name, strict, schema}}``
                         (OpenAI, vLLM, llama.cpp's server)
    json_object_schema   ``{"type": "json_object", "schema": ...}`` (llama.cpp's server and
                         llama-cpp-python, which refuses ``json_schema``)
    json_object          ``{"type": "json_object"}``: any JSON object, the schema only in the prompt
    none                 no ``response_format``: the prompt alone asks for JSON

The reply's content is decoded into ``ModelResponse.json``. A reply the server cut off at the
token limit (``finish_reason: "length"``), whose content is not the JSON object asked for
(and no tool call), or whose body is far larger than ``max_tokens`` allows (``reply_byte_limit``,
whatever the finish reason), is raised as a retryable ``ProviderError``: none of it is ever used
as text.
Tools go out as ``{"type": "function"}`` entries with ``tool_choice: "auto"`` (some servers
never call a tool without it) and tool calls come back as ``ToolCall`` values; arguments that
are not a JSON object become ``{}`` (logged, never raised) so one sloppy call cannot fail a
turn.

The message list is one every server takes: extra system entries are folded into the system
prompt, consecutive entries of one role are merged (llama.cpp refuses two assistant messages at
the end), an assistant entry with tool calls carries ``content: ""`` rather than null, and a
conversation that would open or end on the assistant gets a short user placeholder (a server
that takes a trailing assistant message as the start of its own reply would continue it).

``prompt_cache`` says how the server is asked to keep the prompt's processed prefix:

    off         nothing is added: the body is one every compatible server takes (OpenAI, for
                one, refuses a request field it does not know)
    llama.cpp   ``cache_prompt: true``: llama.cpp's server keeps the slot's processed prompt and
                evaluates only the part after the longest prefix it shares with the last one
                (reported as ``timings.cache_n``)
    key         ``prompt_cache_key``: a digest of the system prompt fixed for the agent
                (``turn_sections_at``), so OpenAI routes every call sharing that prefix to
                the same cache; requests without such a prompt carry none

With a prompt cache asked for, the prompt is sent in prefix-cache order (``layout="cache"``,
``engine.providers.base.laid_out``): the system prompt is the part fixed for the agent, the
history follows, and this turn's sections come as a second system entry right before the
customer's words they are about, so the model reads the same instructions in the same role as
in the prompt as built. Without, it is sent as built (``layout="built"``: the whole system text
first, then the history); ``layout`` set either way overrides that.

``layout="append"`` sends each call of a conversation as the previous call's prompt and reply
plus what is new (``engine.providers.transcript``): one system prompt for both call kinds
(``ModelRequest.prefix``), the entries the provider sent that conversation before, the history
new since, and this call's sections as a system entry last. The provider keeps those entries
per conversation, as a cache of what it sent: a call whose history does not extend the kept
one starts afresh.

``slots`` (llama.cpp): with two or more, understand and speak calls carry ``id_slot`` so each
kind of one conversation keeps a slot of its own (``engine.providers.slots``); in the
append-only layout both kinds of a conversation take one slot.

Building the body and parsing the reply are plain functions, tested without a server.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any, Literal, Unpack

from engine import strict_json
from engine.providers.base import (
    ChatMessage,
    ModelRequest,
    ModelResponse,
    ToolCall,
    Usage,
    laid_out,
)
from engine.providers.http import (
    NOT_JSON,
    HttpOptions,
    JsonApiProvider,
    decode_json_object,
    malformed,
    reply_byte_limit,
    token_count,
    truncation,
    unusable_reply,
    usage_from,
)
from engine.providers.slots import slot_for
from engine.providers.transcript import Transcripts, optional_schema, plain_reply

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"
API_KEY_ENV = ("TURNFLOW_MODEL_API_KEY", "OPENAI_API_KEY")
PROVIDER_NAME = "openai"

JsonMode = Literal["json_schema", "json_object_schema", "json_object", "none"]
"""How a schema is asked for (see the module docstring)."""

JSON_MODES: tuple[JsonMode, ...] = ("json_schema", "json_object_schema", "json_object", "none")
PromptCache = Literal["off", "llama.cpp", "key"]
"""How the server is asked to cache the prompt's prefix (see the module docstring)."""

PROMPT_CACHES: tuple[PromptCache, ...] = ("off", "llama.cpp", "key")
PromptLayout = Literal["cache", "built", "append"]
PROMPT_LAYOUTS: tuple[PromptLayout, ...] = ("cache", "built", "append")
DEFAULT_MAX_TOKENS = 1024
"""The reply cap sent when none is set: far above any envelope the engine asks for, far below a
runaway reply that would hold the server until the timeout."""
NO_NEW_MESSAGE = "(no new message)"
"""Stands in for a user turn a server requires where the conversation has none."""


def _message_entry(message: ChatMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.text}
    entry: dict[str, Any] = {"role": message.role, "content": message.text}
    if message.role == "user" and message.images:  # image content parts, after the text
        parts: list[dict[str, Any]] = []
        if message.text:
            parts.append({"type": "text", "text": message.text})
        parts += [{"type": "image_url", "image_url": {"url": image.data_url()}}
                  for image in message.images]
        entry["content"] = parts
    if message.role == "assistant" and message.tool_calls:
        entry["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in message.tool_calls
        ]
    return entry


def _parts(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return content
    return [{"type": "text", "text": content}] if content else []


def _merged(earlier: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    first, second = earlier["content"], later["content"]
    content: str | list[dict[str, Any]]
    if isinstance(first, str) and isinstance(second, str):
        content = "\n\n".join(t for t in (first, second) if t)
    else:  # a message with images is a list of parts: the merged turn is one too
        content = [*_parts(first), *_parts(second)]
    merged = {"role": earlier["role"], "content": content}
    calls = [*earlier.get("tool_calls", []), *later.get("tool_calls", [])]
    if calls:
        merged["tool_calls"] = calls
    return merged


def chat_messages(
    system: str, messages: list[ChatMessage], *, turn: str = "", turn_at: int | None = None
) -> list[dict[str, Any]]:
    """The ``messages`` of a chat-completions body: one system entry first, no two consecutive
    entries of one role (tool results aside; tool calls of merged turns are kept in order),
    never opening or ending on the assistant. ``turn``: this turn's sections, a second system
    entry placed before ``messages[turn_at:]`` (``laid_out``), never the last entry."""
    system_parts = [system] if system else []
    system_parts += [m.text for m in messages if m.role == "system" and m.text]
    cut = len(messages) if turn_at is None else max(0, min(turn_at, len(messages)))
    out: list[dict[str, Any]] = []
    _add_entries(out, messages[:cut])
    if out and out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": NO_NEW_MESSAGE})
    if turn:
        out.append({"role": "system", "content": turn})
    _add_entries(out, messages[cut:])
    if not out or out[0]["role"] == "assistant":
        out.insert(0, {"role": "user", "content": NO_NEW_MESSAGE})
    if out[-1]["role"] in ("assistant", "system"):
        out.append({"role": "user", "content": NO_NEW_MESSAGE})
    head = [{"role": "system", "content": "\n\n".join(system_parts)}] if system_parts else []
    return head + out


def _add_entries(out: list[dict[str, Any]], messages: list[ChatMessage]) -> None:
    """Append ``messages`` (system ones aside: they join the system prompt) to ``out``,
    merging an entry into the one before it when both are user or both assistant."""
    for message in messages:
        if message.role == "system":
            continue
        entry = _message_entry(message)
        if message.role != "tool" and not entry["content"] and "tool_calls" not in entry:
            continue  # an empty turn says nothing and some servers refuse it
        if out and out[-1]["role"] == entry["role"] and entry["role"] in ("user", "assistant"):
            out[-1] = _merged(out[-1], entry)
            continue
        out.append(entry)


def response_format(request: ModelRequest, json_mode: JsonMode) -> dict[str, Any] | None:
    """The ``response_format`` that asks for ``request.json_schema`` in ``json_mode``."""
    if not request.json_schema or json_mode == "none":
        return None
    if json_mode == "json_object":
        return {"type": "json_object"}
    if json_mode == "json_object_schema":
        return {"type": "json_object", "schema": request.json_schema}
    return {
        "type": "json_schema",
        "json_schema": {"name": request.schema_name, "strict": True, "schema": request.json_schema},
    }


def chat_completion_body(
    request: ModelRequest,
    *,
    model: str,
    max_tokens: int | None = None,
    temperature: float | None = None,
    json_mode: JsonMode = "json_schema",
    prompt_cache: PromptCache = "off",
    layout: PromptLayout | None = None,
    slots: int = 0,
    transcripts: Transcripts | None = None,
    append: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The JSON body of ``POST /chat/completions`` for one request. ``layout``: ``cache`` sends
    the prompt in prefix-cache order (``laid_out``), ``built`` as the engine built it (the whole
    system text first); None: ``cache`` when ``prompt_cache`` asks for a cache, else ``built``.
    ``slots``: the llama.cpp server's slot count, for slot affinity (``engine.providers.slots``;
    0: the server picks). ``transcripts``: what the append-only layout keeps per conversation
    (a fresh one when None: every call then starts afresh); ``append``: the messages
    ``append_messages`` already made for this call."""
    if layout is None:
        layout = "built" if prompt_cache == "off" else "cache"
    if layout == "append":
        if append is None:
            append = append_messages(
                request, transcripts if transcripts is not None else Transcripts())[0]
        body: dict[str, Any] = {"model": model, "messages": append}
        system = request.prefix or laid_out(request).system
    else:
        if layout == "cache":
            system, messages, turn, turn_at = laid_out(request)
        else:
            system, messages, turn, turn_at = request.system, request.messages, "", None
        body = {
            "model": model,
            "messages": chat_messages(system, messages, turn=turn, turn_at=turn_at),
        }
    wanted = response_format(request, json_mode)
    if layout == "append" and plain_reply(request):
        wanted = None  # asked for as plain text (``engine.providers.transcript``)
    elif layout == "append" and wanted is not None and request.schema_name == "understand":
        # Nothing required, so the model leaves out what is zero or not given; not "strict",
        # which OpenAI grants only to a schema that requires every property.
        wanted = response_format(
            request.model_copy(update={"json_schema": optional_schema(request.json_schema)}),
            json_mode)
        if wanted is not None and "json_schema" in wanted:
            wanted["json_schema"]["strict"] = False
    if wanted is not None:
        body["response_format"] = wanted
    if request.tools:
        body["tool_choice"] = "auto"
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in request.tools
        ]
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if temperature is not None:
        body["temperature"] = temperature
    if prompt_cache == "llama.cpp":
        body["cache_prompt"] = True
    elif prompt_cache == "key" and request.turn_sections_at is not None and system:
        body["prompt_cache_key"] = prompt_cache_key(
            model, system if layout == "append" else request.system[
                : request.turn_sections_at].rstrip())
    slot = slot_for(request.schema_name, request.conversation, slots, shared=layout == "append")
    if slot is not None:
        body["id_slot"] = slot
    return body


def append_messages(
    request: ModelRequest, transcripts: Transcripts
) -> tuple[list[dict[str, Any]], Any]:
    """The ``messages`` of ``request`` in the append-only layout, and what ``transcripts``
    keeps of them once the call is answered (``Transcripts.keep``; None: nothing)."""
    system, entries, kept = transcripts.layout(request, _add_entries)
    head = [{"role": "system", "content": system}] if system else []
    if not entries or entries[-1]["role"] == "assistant":
        entries = [*entries, {"role": "user", "content": NO_NEW_MESSAGE}]
    return head + entries, kept


def prompt_cache_key(model: str, system: str) -> str:
    """``tf-`` and 128 bits of SHA-256 over the model and the fixed system prompt: equal for
    every call of one agent version, different (but for a 2^-64 birthday chance across 2^32
    versions) for any other prefix or model."""
    digest = hashlib.sha256(f"{model}\n{system}".encode()).hexdigest()
    return f"tf-{digest[:32]}"


def _arguments(raw: Any, *, tool: str) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            decoded = strict_json.loads(raw)
        except (ValueError, RecursionError):
            decoded = None
        if isinstance(decoded, dict):
            return decoded
    log.warning("tool call %r: arguments are not a JSON object; passing {}", tool)
    return {}


def _tool_calls(raw: Any) -> list[ToolCall]:
    if not isinstance(raw, list):
        return []
    calls: list[ToolCall] = []
    for index, item in enumerate(raw):
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            continue
        name = function["name"]
        call_id = item.get("id") if isinstance(item.get("id"), str) else f"call_{index}"
        calls.append(ToolCall(id=call_id, name=name, arguments=_arguments(
            function.get("arguments"), tool=name)))
    return calls


def _bearer_headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _usage(raw: Any) -> Usage | None:
    """``prompt_tokens`` is the whole prompt; ``prompt_tokens_details.cached_tokens``, where the
    server reports it, the part of it read from the prompt cache."""
    usage = usage_from(raw, input_key="prompt_tokens", output_key="completion_tokens")
    details = raw.get("prompt_tokens_details") if usage is not None else None
    if usage is None or not isinstance(details, dict):
        return usage
    return usage.model_copy(update={"cache_read_tokens": token_count(details.get("cached_tokens"))})


def parse_chat_completion(
    body: Mapping[str, Any], *, wants_json: bool, max_tokens: int | None = None
) -> ModelResponse:
    """A ``ModelResponse`` from a chat-completions body; a retryable ``ProviderError`` for a body
    without a message, a reply cut off at the token limit, or (``wants_json``) content that is
    not a JSON object when no tool was called. ``max_tokens`` only names the cap in the error."""
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise malformed(PROVIDER_NAME, "no choices in the body")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise malformed(PROVIDER_NAME, "the first choice has no message")
    content = message.get("content")
    if isinstance(content, list):  # some compatible servers send content parts
        content = "".join(
            part.get("text", "") for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    text = content if isinstance(content, str) else ""
    finish = choices[0].get("finish_reason")
    if finish == "length":
        raise truncation(PROVIDER_NAME, reason="length", max_tokens=max_tokens)
    tool_calls = _tool_calls(message.get("tool_calls"))
    decoded = decode_json_object(text) if wants_json and text else None
    if wants_json and decoded is None and not tool_calls:
        raise unusable_reply(PROVIDER_NAME, f"{NOT_JSON} (finish reason {finish!r})")
    answered_by = body.get("model")
    return ModelResponse(
        text=text, json=decoded, tool_calls=tool_calls, usage=_usage(body.get("usage")),
        model=answered_by if isinstance(answered_by, str) else None,
    )


class OpenAIProvider(JsonApiProvider):
    """An OpenAI-compatible chat-completions provider.

    The key comes from ``api_key`` or, when that is None, ``TURNFLOW_MODEL_API_KEY`` then
    ``OPENAI_API_KEY``; with no key at all no ``Authorization`` header is sent (local servers
    such as Ollama need none). ``repr`` shows the model and URL, never the key. ``options``: the
    server, timeout, hooks and clients every HTTP provider takes (``HttpOptions``).
    """

    label = "OpenAI-compatible"
    provider_name = PROVIDER_NAME
    api_key_env = API_KEY_ENV
    default_base_url = DEFAULT_BASE_URL
    auth_headers = staticmethod(_bearer_headers)

    def __init__(
        self,
        api_key: str | None = None,
        *,
        model: str = DEFAULT_MODEL,
        max_tokens: int | None = DEFAULT_MAX_TOKENS,
        temperature: float | None = None,
        json_mode: JsonMode = "json_schema",
        prompt_cache: PromptCache = "off",
        layout: PromptLayout | None = None,
        slots: int = 0,
        **options: Unpack[HttpOptions],
    ) -> None:
        super().__init__(api_key, **options)
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.json_mode: JsonMode = json_mode
        self.prompt_cache: PromptCache = prompt_cache
        self.layout: PromptLayout | None = layout
        self.slots = slots
        self.transcripts = Transcripts()
        """What the append-only layout sent each conversation last (``layout="append"``)."""

    async def generate(self, request: ModelRequest) -> ModelResponse:
        async def call() -> ModelResponse:
            kept, append = None, None
            if self.layout == "append":
                append, kept = append_messages(request, self.transcripts)
            body = chat_completion_body(
                request, model=self.model, max_tokens=self.max_tokens,
                temperature=self.temperature, json_mode=self.json_mode,
                prompt_cache=self.prompt_cache, layout=self.layout, slots=self.slots,
                append=append,
            )
            reply = await self._api.post(
                "chat/completions", body, max_reply_bytes=reply_byte_limit(self.max_tokens)
            )
            plain = self.layout == "append" and plain_reply(request)
            response = parse_chat_completion(
                reply, wants_json=bool(request.json_schema) and not plain,
                max_tokens=self.max_tokens,
            )
            if kept is not None and request.conversation is not None:
                self.transcripts.keep(request.conversation, kept, response.text,
                                      understand=request.schema_name == "understand")
            return response

        return await self._observed(request, call)


__all__ = [
    "DEFAULT_MAX_TOKENS",
    "JSON_MODES",
    "PROMPT_CACHES",
    "PROMPT_LAYOUTS",
    "JsonMode",
    "OpenAIProvider",
    "PromptCache",
    "PromptLayout",
    "append_messages",
    "chat_completion_body",
    "chat_messages",
    "parse_chat_completion",
    "prompt_cache_key",
    "response_format",
]
