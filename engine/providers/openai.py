"""``OpenAIProvider``: any OpenAI-compatible chat-completions server (OpenAI, vLLM, Ollama,
LiteLLM, OpenRouter, ...), chosen by ``base_url``.

A request with a ``json_schema`` asks for strict structured output
(``response_format: {"type": "json_schema", ...}``; ``json_mode="json_object"`` or ``"none"``
for servers that lack it) and the reply's content is decoded into ``ModelResponse.json``;
content that is not a JSON object leaves ``json`` None and the engine treats it as an empty
judgement. Tools go out as ``{"type": "function"}`` entries and tool calls
come back as ``ToolCall`` values; arguments that are not a JSON object become ``{}`` (logged,
never raised) so one sloppy call cannot fail a turn.

Building the body and parsing the reply are plain functions, tested without a server.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

import httpx

from engine.clock import Clock
from engine.providers.base import (
    ChatMessage,
    ModelRequest,
    ModelResponse,
    ProviderHooks,
    ToolCall,
    Usage,
)
from engine.providers.http import (
    JsonApiProvider,
    decode_json_object,
    malformed,
    usage_from,
)

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"
API_KEY_ENV = ("TURNFLOW_MODEL_API_KEY", "OPENAI_API_KEY")
PROVIDER_NAME = "openai"

JsonMode = Literal["json_schema", "json_object", "none"]
"""How a schema is asked for: strict JSON schema, any JSON object, or only by the prompt."""


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
        entry["content"] = message.text or None
        entry["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in message.tool_calls
        ]
    return entry


def chat_completion_body(
    request: ModelRequest,
    *,
    model: str,
    max_tokens: int | None = None,
    temperature: float | None = None,
    json_mode: JsonMode = "json_schema",
) -> dict[str, Any]:
    """The JSON body of ``POST /chat/completions`` for one request."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.extend(_message_entry(message) for message in request.messages)
    body: dict[str, Any] = {"model": model, "messages": messages}
    if request.json_schema and json_mode == "json_object":
        body["response_format"] = {"type": "json_object"}
    elif request.json_schema and json_mode == "json_schema":
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": request.schema_name,
                "strict": True,
                "schema": request.json_schema,
            },
        }
    if request.tools:
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
    return body


def _arguments(raw: Any, *, tool: str) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            decoded = json.loads(raw)
        except ValueError:
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
    return usage_from(raw, input_key="prompt_tokens", output_key="completion_tokens")


def parse_chat_completion(body: Mapping[str, Any], *, wants_json: bool) -> ModelResponse:
    """A ``ModelResponse`` from a chat-completions body; ``ProviderError`` without a message."""
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
    return ModelResponse(
        text=text,
        json=decode_json_object(text) if wants_json and text else None,
        tool_calls=_tool_calls(message.get("tool_calls")),
        usage=_usage(body.get("usage")),
    )


class OpenAIProvider(JsonApiProvider):
    """An OpenAI-compatible chat-completions provider.

    The key comes from ``api_key`` or, when that is None, ``TURNFLOW_MODEL_API_KEY`` then
    ``OPENAI_API_KEY``; with no key at all no ``Authorization`` header is sent (local servers
    such as Ollama need none). ``repr`` shows the model and URL, never the key.
    """

    def __init__(
        self,
        api_key: str | None = None,
        *,
        model: str = DEFAULT_MODEL,
        base_url: str = DEFAULT_BASE_URL,
        timeout: float = 60.0,
        max_tokens: int | None = None,
        temperature: float | None = None,
        json_mode: JsonMode = "json_schema",
        hooks: ProviderHooks | None = None,
        clock: Clock | None = None,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timer: Callable[[], float] = time.perf_counter,
        env: Mapping[str, str] | None = None,
    ) -> None:
        environ = os.environ if env is None else env
        if api_key is None:
            api_key = next((environ[name] for name in API_KEY_ENV if environ.get(name)), "")
        super().__init__(
            provider=PROVIDER_NAME,
            api_key=api_key,
            auth_headers=_bearer_headers,
            base_url=base_url,
            timeout=timeout,
            hooks=hooks,
            clock=clock,
            client=client,
            transport=transport,
            timer=timer,
        )
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.json_mode: JsonMode = json_mode

    @property
    def description(self) -> str:
        """One line naming the provider, model and server; safe to log."""
        return f"OpenAI-compatible model {self.model} at {self.base_url} ({self._auth_note})"

    def __repr__(self) -> str:
        return f"OpenAIProvider(model={self.model!r}, base_url={self.base_url!r})"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        async def call() -> ModelResponse:
            body = chat_completion_body(
                request, model=self.model, max_tokens=self.max_tokens,
                temperature=self.temperature, json_mode=self.json_mode,
            )
            reply = await self._api.post("chat/completions", body)
            return parse_chat_completion(reply, wants_json=bool(request.json_schema))

        return await self._observed(request, call)


__all__ = ["JsonMode", "OpenAIProvider", "chat_completion_body", "parse_chat_completion"]
