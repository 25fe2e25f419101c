"""``AnthropicProvider``: the Anthropic Messages API.

Structured output goes through a forced tool: the envelope schema is offered as one extra tool,
``<schema_name>_envelope``, and ``tool_choice`` makes the model call it (``{"type": "tool"}``
when it is the only tool, ``{"type": "any"}`` when real tools are offered too, so the model may
call those first). That tool's input becomes ``ModelResponse.json``; calls of the real tools
become ``ToolCall`` values. The system prompt is the top-level ``system`` field.

The Messages API wants user and assistant turns, a user turn first and last, and no empty text
blocks: consecutive entries of one role are merged into one turn, tool results ride in a user
turn, and a conversation that would open or end on the assistant gets a short user placeholder.

A reply stopped at the token limit (``stop_reason: "max_tokens"``), one that asked for the
envelope and carries neither it nor a tool call, or one whose body is far larger than
``max_tokens`` allows (``reply_byte_limit``), is raised as a retryable ``ProviderError`` with
the reason logged: none of it is ever used as text.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Unpack

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

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MODEL = "claude-3-5-haiku-latest"
API_VERSION = "2023-06-01"
API_KEY_ENV = "ANTHROPIC_API_KEY"
PROVIDER_NAME = "anthropic"
NO_NEW_MESSAGE = "(no new message)"
"""Stands in for a user turn the API requires where the conversation has none."""


def envelope_tool_name(request: ModelRequest) -> str:
    return f"{request.schema_name}_envelope"


def _blocks(message: ChatMessage, *, tool_blocks: bool) -> list[dict[str, Any]]:
    # The API refuses tool_use/tool_result blocks in a request that defines no tools, so a
    # call without tools replays earlier tool rounds as text.
    if message.role == "tool":
        if not tool_blocks:
            return [{"type": "text", "text": f"[tool result] {message.text}"}]
        return [{"type": "tool_result", "tool_use_id": message.tool_call_id or "",
                 "content": message.text or NO_NEW_MESSAGE}]
    blocks: list[dict[str, Any]] = []
    if message.role == "user":  # image blocks first, as the Messages API recommends
        for image in message.images:
            source: dict[str, Any] = (
                {"type": "url", "url": image.url} if image.url else
                {"type": "base64", "media_type": image.media_type, "data": image.data or ""}
            )
            blocks.append({"type": "image", "source": source})
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    if message.role == "assistant":
        for call in message.tool_calls:
            if tool_blocks:
                blocks.append(
                    {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
                )
            else:
                arguments = json.dumps(call.arguments, ensure_ascii=False)
                blocks.append({"type": "text", "text": f"[called {call.name}({arguments})]"})
    return blocks


def _turns(messages: list[ChatMessage], *, tool_blocks: bool = True) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue  # folded into the top-level system prompt
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message, tool_blocks=tool_blocks)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    placeholder = {"type": "text", "text": NO_NEW_MESSAGE}
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [dict(placeholder)]})
    if turns[-1]["role"] != "user":
        turns.append({"role": "user", "content": [dict(placeholder)]})
    return turns


CACHE_MIN_TOKENS = 1024
"""The shortest prefix the Messages API caches (2,048 tokens on Haiku models)."""
CHARS_PER_TOKEN = 4
"""A token is taken as four characters of text, as English prose averages, since no tokenizer
is at hand; a breakpoint after a prefix the estimate puts over the minimum but the API counts
under it is ignored by the API (nothing cached, nothing refused)."""


def _cacheable(system: str, model: str) -> bool:
    minimum = CACHE_MIN_TOKENS * (2 if "haiku" in model.lower() else 1)
    return len(system) >= minimum * CHARS_PER_TOKEN


def messages_body(
    request: ModelRequest, *, model: str, max_tokens: int, prompt_cache: bool = False
) -> dict[str, Any]:
    """The JSON body of ``POST /v1/messages`` for one request: the system prompt and messages
    as built. ``prompt_cache``: when the part of the system prompt fixed for the agent is long
    enough to cache, the system prompt is sent as two blocks, that part with a cache breakpoint
    and this turn's sections after it (the same text the model reads either way)."""
    system, messages = request.system, request.messages
    system_parts = [system] if system else []
    system_parts += [m.text for m in messages if m.role == "system" and m.text]
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": _turns(messages, tool_blocks=bool(request.tools or request.json_schema)),
    }
    if system_parts:
        text = "\n\n".join(system_parts)
        fixed, _, turn, _ = laid_out(request)
        if prompt_cache and request.turn_sections_at is not None and _cacheable(fixed, model):
            # The part fixed for the agent: a cache breakpoint after it lets every
            # conversation's calls read it from the prompt cache.
            rest = "\n\n".join(part for part in (turn, *system_parts[1:]) if part)
            body["system"] = [{"type": "text", "text": fixed,
                               "cache_control": {"type": "ephemeral"}}]
            if rest:
                body["system"].append({"type": "text", "text": rest})
        else:
            body["system"] = text
    tools = [
        {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
        for tool in request.tools
    ]
    if request.json_schema:
        tools.append({
            "name": envelope_tool_name(request),
            "description": "Give your whole answer by calling this tool with every property set.",
            "input_schema": request.json_schema,
        })
        if request.tools:
            body["tool_choice"] = {"type": "any"}
        else:
            body["tool_choice"] = {"type": "tool", "name": envelope_tool_name(request)}
    if tools:
        body["tools"] = tools
    return body


def _anthropic_headers(api_key: str) -> dict[str, str]:
    headers = {"anthropic-version": API_VERSION}
    if api_key:
        headers["x-api-key"] = api_key
    return headers


def _usage(raw: Any) -> Usage | None:
    """The Messages API counts the prompt in three parts: ``input_tokens`` (after the last cache
    breakpoint), ``cache_read_input_tokens`` and ``cache_creation_input_tokens``. The whole
    prompt is their sum, as OpenAI-compatible servers report it; the cached parts are kept."""
    usage = usage_from(raw, input_key="input_tokens", output_key="output_tokens")
    if usage is None:
        return None
    read = token_count(raw.get("cache_read_input_tokens"))
    written = token_count(raw.get("cache_creation_input_tokens"))
    whole = usage.input_tokens
    if whole is not None:
        whole += (read or 0) + (written or 0)
    return Usage(input_tokens=whole, output_tokens=usage.output_tokens,
                 cache_read_tokens=read, cache_write_tokens=written)


def parse_message(
    body: Mapping[str, Any], *, envelope_tool: str | None, max_tokens: int | None = None
) -> ModelResponse:
    """A ``ModelResponse`` from a Messages API body; a retryable ``ProviderError`` when it has no
    content, stopped at the token limit, or lacks the envelope it was asked for.

    ``envelope_tool`` names the forced tool whose input is the JSON envelope (None when the
    request asked for none); a JSON object written as plain text is accepted as well.
    ``max_tokens`` only names the cap in the error.
    """
    content = body.get("content")
    if not isinstance(content, list):
        raise malformed(PROVIDER_NAME, "no content list in the body")
    stop = body.get("stop_reason")
    if stop == "max_tokens":
        raise truncation(PROVIDER_NAME, reason="max_tokens", max_tokens=max_tokens)
    texts: list[str] = []
    envelope: dict[str, Any] | None = None
    calls: list[ToolCall] = []
    for index, block in enumerate(content):
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use" and isinstance(block.get("name"), str):
            arguments = block.get("input")
            if not isinstance(arguments, dict):
                log.warning("tool_use %r: input is not a JSON object; passing {}", block["name"])
                arguments = {}
            if envelope_tool is not None and block["name"] == envelope_tool:
                envelope = arguments
            else:
                call_id = block.get("id") if isinstance(block.get("id"), str) else f"toolu_{index}"
                calls.append(ToolCall(id=call_id, name=block["name"], arguments=arguments))
    text = "".join(texts)
    if envelope is None and envelope_tool is not None and text:
        envelope = decode_json_object(text)
    if envelope is None and envelope_tool is not None and not calls:
        raise unusable_reply(PROVIDER_NAME, f"{NOT_JSON} (stop reason {stop!r})")
    usage = _usage(body.get("usage"))
    answered_by = body.get("model")
    return ModelResponse(text=text, json=envelope, tool_calls=calls, usage=usage,
                         model=answered_by if isinstance(answered_by, str) else None)


class AnthropicProvider(JsonApiProvider):
    """An Anthropic Messages API provider.

    The key comes from ``api_key`` or, when that is None, ``ANTHROPIC_API_KEY``. ``repr`` shows
    the model and URL, never the key. ``options``: the server, timeout, hooks and clients every
    HTTP provider takes (``HttpOptions``).
    """

    label = "Anthropic"
    provider_name = PROVIDER_NAME
    api_key_env = (API_KEY_ENV,)
    default_base_url = DEFAULT_BASE_URL
    auth_headers = staticmethod(_anthropic_headers)

    def __init__(
        self,
        api_key: str | None = None,
        *,
        model: str = DEFAULT_MODEL,
        max_tokens: int = 1024,
        prompt_cache: bool = False,
        **options: Unpack[HttpOptions],
    ) -> None:
        super().__init__(api_key, **options)
        self.model = model
        self.max_tokens = max_tokens
        self.prompt_cache = prompt_cache

    async def generate(self, request: ModelRequest) -> ModelResponse:
        async def call() -> ModelResponse:
            body = messages_body(request, model=self.model, max_tokens=self.max_tokens,
                                 prompt_cache=self.prompt_cache)
            reply = await self._api.post(
                "v1/messages", body, max_reply_bytes=reply_byte_limit(self.max_tokens)
            )
            envelope = envelope_tool_name(request) if request.json_schema else None
            return parse_message(reply, envelope_tool=envelope, max_tokens=self.max_tokens)

        return await self._observed(request, call)


__all__ = ["AnthropicProvider", "messages_body", "parse_message"]
