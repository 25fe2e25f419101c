"""The attributes of a model-call span, per the OpenTelemetry GenAI semantic conventions.

Pinned to the GenAI conventions (status Development) as the main OpenTelemetry semantic
conventions defined them before they moved to their own repository: the attribute names of the
``opentelemetry-semantic-conventions`` 0.66b2 package (``gen_ai_attributes``). The newer GenAI
repository renames some (``gen_ai.usage.cache_creation.input_tokens`` became
``...cache_write...``); moving to it is a change of this module alone. Kept apart from
``tracing`` and free of OpenTelemetry imports: a ``CallRecord`` in, plain values out, so it is
tested alone and costs nothing while tracing is off.

Every call is an inference (``gen_ai.operation.name`` ``chat``); ``gen_ai.output.type`` is
``text`` for a speak call (it writes the customer's reply) and ``json`` for the others (they
fill a JSON envelope). The call kind is ``turnflow.model.call``. With ``prompts`` (the turn
records prompts, ``MODEL_RECORDING=prompts``) the span also holds what was sent and what came
back: ``gen_ai.system_instructions``, ``gen_ai.input.messages`` and
``gen_ai.output.messages`` as JSON text in the conventions' message shape (role, parts).
Without it nothing of the conversation's words is on the span.
"""

from __future__ import annotations

import json
from typing import Any

from engine.providers.base import CallRecord, ChatMessage, ModelResponse

__all__ = ["OPERATION", "call_attributes", "input_messages", "output_messages", "span_name"]

OPERATION = "chat"
"""``gen_ai.operation.name`` of every model call: one chat-completion style inference."""

_TEXT_CALLS = frozenset({"speak"})


def span_name(record: CallRecord) -> str:
    """``{gen_ai.operation.name} {gen_ai.request.model}``; the operation alone when the
    provider names no model (the offline rules, a test double)."""
    return f"{OPERATION} {record.model}" if record.model else OPERATION


def call_attributes(record: CallRecord, *, prompts: bool) -> dict[str, Any]:
    """The span attributes of one call; the prompt and the reply only with ``prompts``."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": OPERATION,
        "gen_ai.provider.name": record.provider,
        "gen_ai.output.type": "text" if record.schema_name in _TEXT_CALLS else "json",
        "turnflow.model.call": record.schema_name,
    }
    if record.model:
        attributes["gen_ai.request.model"] = record.model
    response = record.response
    if response is not None and response.model:
        attributes["gen_ai.response.model"] = response.model
    usage = record.usage
    if usage is not None:
        for name, count in (
            ("gen_ai.usage.input_tokens", usage.input_tokens),
            ("gen_ai.usage.output_tokens", usage.output_tokens),
            ("gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens),
            ("gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens),
        ):
            if count is not None:
                attributes[name] = count
    if not record.ok:
        attributes["error.type"] = record.error_type or record.error_kind or "_OTHER"
        if record.error_kind:
            attributes["turnflow.model.error_kind"] = record.error_kind
    if prompts:
        if record.request is not None:
            # As the engine built the request: whether a provider sends this turn's sections
            # after the history (a prompt-cache layout) changes the order, not the content.
            system, messages = record.request.system, record.request.messages
            if system:
                attributes["gen_ai.system_instructions"] = _json(
                    [{"type": "text", "content": system}]
                )
            attributes["gen_ai.input.messages"] = _json(input_messages(messages))
        if response is not None:
            attributes["gen_ai.output.messages"] = _json(output_messages(response))
    return attributes


def input_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The messages sent, in the conventions' shape: a role and its parts (text, tool calls,
    tool results, image URLs; inline image bytes are left out)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        parts: list[dict[str, Any]] = []
        if message.role == "tool":
            parts.append({"type": "tool_call_response", "id": message.tool_call_id,
                          "response": message.text})
        elif message.text:
            parts.append({"type": "text", "content": message.text})
        for call in message.tool_calls:
            parts.append({"type": "tool_call", "id": call.id, "name": call.name,
                          "arguments": call.arguments})
        for image in message.images:
            if image.url:
                parts.append({"type": "uri", "modality": "image", "mime_type": image.media_type,
                              "uri": image.url})
        out.append({"role": message.role, "parts": parts})
    return out


def output_messages(response: ModelResponse) -> list[dict[str, Any]]:
    """The reply in the conventions' shape: one assistant message whose parts are its text,
    its JSON envelope (as text) and its tool calls."""
    parts: list[dict[str, Any]] = []
    if response.text:
        parts.append({"type": "text", "content": response.text})
    if response.json is not None and not response.text:
        parts.append({"type": "text", "content": _json(response.json)})
    for call in response.tool_calls:
        parts.append({"type": "tool_call", "id": call.id, "name": call.name,
                      "arguments": call.arguments})
    finish = "tool_call" if response.tool_calls else "stop"
    return [{"role": "assistant", "parts": parts, "finish_reason": finish}]


def _json(value: Any) -> str:
    """``value`` as compact JSON text (unicode kept); anything JSON cannot hold as its text."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (ValueError, RecursionError):  # a circular or too deeply nested value
        return json.dumps(str(value)[:10_000], ensure_ascii=False)
