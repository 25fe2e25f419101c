"""AnthropicProvider: Messages API bodies, the forced envelope tool, parsing, errors."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.errors import ProviderError
from engine.providers import AnthropicProvider
from engine.providers.anthropic import NO_NEW_MESSAGE, messages_body, parse_message
from engine.providers.base import (
    CallRecord,
    ChatMessage,
    ModelRequest,
    ProviderHooks,
    ToolCall,
    ToolSpec,
    Usage,
)
from tests.engine.providers.conftest import Canned, CannedServer

KEY = "sk-ant-SECRET-abcdef987654"
SCHEMA = {
    "type": "object",
    "properties": {"message": {"type": ["string", "null"]}},
    "required": ["message"],
    "additionalProperties": False,
}
LOOKUP = ToolSpec(name="lookup", description="Find an order",
                  parameters={"type": "object", "properties": {"id": {"type": "string"}}})


def request(*, schema: bool = True, tools: bool = False,
            messages: list[ChatMessage] | None = None) -> ModelRequest:
    return ModelRequest(
        schema_name="speak",
        system="You are Ana.",
        messages=messages if messages is not None else [ChatMessage(role="user", text="oi")],
        json_schema=SCHEMA if schema else {},
        tools=[LOOKUP] if tools else [],
    )


def reply(*blocks: dict[str, Any], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"id": "msg_1", "type": "message", "role": "assistant",
                            "content": list(blocks), "stop_reason": "end_turn"}
    if usage is not None:
        body["usage"] = usage
    return body


# --- request bodies ------------------------------------------------------------------------

def test_body_forces_the_envelope_tool_when_there_are_no_tools() -> None:
    """A schema with no tools: the envelope is the only tool and tool_choice forces it."""
    body = messages_body(request(), model="claude-x", max_tokens=300)
    assert body["system"] == "You are Ana."
    assert body["max_tokens"] == 300 and body["model"] == "claude-x"
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "oi"}]}]
    assert body["tools"] == [{"name": "speak_envelope", "description": body["tools"][0][
        "description"], "input_schema": SCHEMA}]
    assert body["tool_choice"] == {"type": "tool", "name": "speak_envelope"}


def test_body_with_tools_lets_the_model_choose_any_tool() -> None:
    """A schema plus real tools: all are offered and tool_choice is "any"."""
    body = messages_body(request(tools=True), model="m", max_tokens=10)
    assert [t["name"] for t in body["tools"]] == ["lookup", "speak_envelope"]
    assert body["tools"][0]["input_schema"] == LOOKUP.parameters
    assert body["tool_choice"] == {"type": "any"}


def test_body_without_schema_or_tools() -> None:
    """No schema and no tools: neither tools nor tool_choice is sent."""
    body = messages_body(request(schema=False), model="m", max_tokens=10)
    assert "tools" not in body and "tool_choice" not in body


def test_body_shapes_turns_for_the_messages_api() -> None:
    """System entries fold into system; tool rounds become tool_use/tool_result blocks; the
    conversation opens and ends on a user turn."""
    body = messages_body(request(messages=[
        ChatMessage(role="assistant", text="Olá! Como posso ajudar?"),
        ChatMessage(role="system", text="Summary: the customer is Ana."),
        ChatMessage(role="user", text="pedido 7?"),
        ChatMessage(role="assistant", text="", tool_calls=[
            ToolCall(id="t1", name="lookup", arguments={"id": "7"}),
            ToolCall(id="t2", name="lookup", arguments={"id": "8"})]),
        ChatMessage(role="tool", tool_call_id="t1", text="shipped"),
        ChatMessage(role="tool", tool_call_id="t2", text=""),
        ChatMessage(role="assistant", text="Enviado."),
    ]), model="m", max_tokens=10)
    assert body["system"] == "You are Ana.\n\nSummary: the customer is Ana."
    assert [turn["role"] for turn in body["messages"]] == [
        "user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert body["messages"][0]["content"] == [{"type": "text", "text": NO_NEW_MESSAGE}]
    assert body["messages"][3]["content"] == [
        {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"id": "7"}},
        {"type": "tool_use", "id": "t2", "name": "lookup", "input": {"id": "8"}},
    ]
    assert body["messages"][4]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "shipped"},
        {"type": "tool_result", "tool_use_id": "t2", "content": NO_NEW_MESSAGE},
    ]
    assert body["messages"][-1]["content"] == [{"type": "text", "text": NO_NEW_MESSAGE}]


def test_body_without_tools_replays_tool_rounds_as_text() -> None:
    """A call that defines no tools sends earlier tool rounds as text, which the API accepts."""
    body = messages_body(request(schema=False, messages=[
        ChatMessage(role="user", text="pedido 7?"),
        ChatMessage(role="assistant", tool_calls=[ToolCall(id="t1", name="lookup",
                                                           arguments={"id": "7"})]),
        ChatMessage(role="tool", tool_call_id="t1", text="enviado"),
    ]), model="m", max_tokens=10)
    assert "tools" not in body
    called = '[called lookup({"id": "7"})]'
    assert body["messages"][1:] == [
        {"role": "assistant", "content": [{"type": "text", "text": called}]},
        {"role": "user", "content": [{"type": "text", "text": "[tool result] enviado"}]},
    ]


def test_body_with_no_messages_still_has_a_user_turn() -> None:
    """A call with no conversation at all sends one placeholder user turn."""
    body = messages_body(request(messages=[]), model="m", max_tokens=10)
    assert body["messages"] == [{"role": "user",
                                 "content": [{"type": "text", "text": NO_NEW_MESSAGE}]}]


# --- parsing -------------------------------------------------------------------------------

def test_parse_envelope_tool_into_json() -> None:
    """The envelope tool's input is the JSON; it is not reported as a tool call."""
    response = parse_message(reply(
        {"type": "tool_use", "id": "toolu_1", "name": "speak_envelope",
         "input": {"message": "Oi!"}}, usage={"input_tokens": 20, "output_tokens": 6},
    ), envelope_tool="speak_envelope")
    assert response.json == {"message": "Oi!"} and response.tool_calls == []
    assert response.usage == Usage(input_tokens=20, output_tokens=6)


def test_usage_counts_the_whole_prompt_and_keeps_the_cached_parts() -> None:
    """The Messages API reports only the tokens after the cache in ``input_tokens``: the whole
    prompt is that plus what was read from and written to the cache, and those are kept."""
    # The second identical call to llama.cpp's /v1/messages: 18 of 19 prompt tokens cached.
    cached = parse_message(reply({"type": "text", "text": "Hello there!"}, usage={
        "cache_read_input_tokens": 18, "input_tokens": 1, "output_tokens": 23}),
        envelope_tool=None)
    assert cached.usage == Usage(input_tokens=19, output_tokens=23, cache_read_tokens=18)
    # The Messages API's own shape on a call that writes a cache breakpoint.
    written = parse_message(reply({"type": "text", "text": "Hi"}, usage={
        "input_tokens": 50, "cache_creation_input_tokens": 1800, "cache_read_input_tokens": 0,
        "output_tokens": 503}), envelope_tool=None)
    assert written.usage == Usage(input_tokens=1850, output_tokens=503, cache_read_tokens=0,
                                  cache_write_tokens=1800)
    # A cache count that is not a count is unknown and adds nothing; no input count, no total.
    odd = parse_message(reply({"type": "text", "text": "Hi"}, usage={
        "input_tokens": 4, "cache_read_input_tokens": "18", "cache_creation_input_tokens": True,
        "output_tokens": 2}), envelope_tool=None)
    assert odd.usage == Usage(input_tokens=4, output_tokens=2)
    blind = parse_message(reply({"type": "text", "text": "Hi"}, usage={
        "cache_read_input_tokens": 18, "output_tokens": 2}), envelope_tool=None)
    assert blind.usage == Usage(output_tokens=2, cache_read_tokens=18)


TOKEN_VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                         st.text(max_size=5), st.lists(st.integers(), max_size=2))


@given(st.dictionaries(st.sampled_from(["input_tokens", "output_tokens",
                                        "cache_read_input_tokens",
                                        "cache_creation_input_tokens", "other"]),
                       TOKEN_VALUES))
def test_any_usage_object_gives_counts_or_unknowns(usage: dict[str, Any]) -> None:
    """Whatever a server puts in ``usage``, the reply parses; each count is a non-negative int
    or None, and the whole prompt is never less than the part outside the cache."""
    parsed = parse_message(reply({"type": "text", "text": "Hi"}, usage=usage),
                           envelope_tool=None).usage
    assert parsed is not None
    counts = [parsed.input_tokens, parsed.output_tokens, parsed.cache_read_tokens,
              parsed.cache_write_tokens]
    assert all(c is None or (type(c) is int and c >= 0) for c in counts)
    given_input = usage.get("input_tokens")
    if parsed.input_tokens is not None:
        assert type(given_input) is int and parsed.input_tokens >= given_input


def test_parse_real_tool_calls_and_text() -> None:
    """Text blocks join into text; other tool_use blocks become ToolCall values."""
    response = parse_message(reply(
        {"type": "text", "text": "Let me check. "},
        {"type": "tool_use", "id": "toolu_01A", "name": "lookup", "input": {"id": "7"}},
        {"type": "tool_use", "name": "lookup", "input": "not an object"},
    ), envelope_tool="speak_envelope")
    assert response.text == "Let me check. " and response.json is None
    assert response.tool_calls == [ToolCall(id="toolu_01A", name="lookup", arguments={"id": "7"}),
                                   ToolCall(id="toolu_2", name="lookup", arguments={})]


def test_parse_json_written_as_text() -> None:
    """An envelope answered as plain JSON text is accepted when the tool was not called."""
    response = parse_message(reply({"type": "text", "text": '{"message": "Oi"}'}),
                             envelope_tool="speak_envelope")
    assert response.json == {"message": "Oi"}
    plain = parse_message(reply({"type": "text", "text": '{"message": "Oi"}'}),
                          envelope_tool=None)
    assert plain.json is None


def test_parse_body_without_content_is_retryable() -> None:
    """A 200 body with no content list is a retryable malformed response."""
    with pytest.raises(ProviderError, match="no content list") as caught:
        parse_message({"type": "message"}, envelope_tool=None)
    assert caught.value.kind == "retryable"


# --- against a real local server -----------------------------------------------------------

async def test_round_trip_against_local_server(canned_server: CannedServer) -> None:
    """The provider POSTs to /v1/messages with x-api-key and version, and returns the envelope."""
    canned_server.queue(Canned(body=reply(
        {"type": "tool_use", "id": "toolu_1", "name": "speak_envelope",
         "input": {"message": "Olá!"}}, usage={"input_tokens": 11, "output_tokens": 4})
        | {"model": "claude-test-20260101"}))
    records: list[CallRecord] = []
    async with AnthropicProvider(KEY, model="claude-test", base_url=canned_server.url,
                                 hooks=ProviderHooks([records.append])) as provider:
        response = await provider.generate(request())
    assert response.json == {"message": "Olá!"}
    [received] = canned_server.received
    assert received.path == "/v1/messages"
    assert received.headers["x-api-key"] == KEY
    assert received.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in received.headers
    assert received.body["tool_choice"] == {"type": "tool", "name": "speak_envelope"}
    assert [(r.provider, r.ok, r.usage) for r in records] == [
        ("anthropic", True, Usage(input_tokens=11, output_tokens=4))]
    # The hooks see the model asked for, the one that answered, the request and the response.
    assert records[0].model == "claude-test" and records[0].request == request()
    assert records[0].response is response and response.model == "claude-test-20260101"


@pytest.mark.parametrize(
    ("canned", "kind"),
    [
        (Canned(429, {"type": "error", "error": {"type": "rate_limit_error", "message": "x"}},
                {"retry-after": "20"}), "retryable"),
        (Canned(529, {"type": "error", "error": {"type": "overloaded_error", "message": "x"}}),
         "retryable"),
        (Canned(500, {"type": "error", "error": {"type": "api_error", "message": "x"}}),
         "retryable"),
        (Canned(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                 "message": "prompt is too long: 210000 tokens"}}),
         "fatal"),
        (Canned(401, {"type": "error", "error": {"type": "authentication_error",
                                                 "message": "invalid x-api-key"}}), "fatal"),
        (Canned(403, {"type": "error", "error": {"type": "permission_error", "message": "x"}}),
         "fatal"),
    ],
)
async def test_error_statuses_from_local_server(
    canned_server: CannedServer, canned: Canned, kind: str
) -> None:
    """Anthropic error statuses map to their kinds; the API's error type is in the message."""
    canned_server.queue(canned)
    async with AnthropicProvider(KEY, base_url=canned_server.url) as provider:
        with pytest.raises(ProviderError) as caught:
            await provider.generate(request())
    assert (caught.value.kind, caught.value.status) == (kind, canned.status)
    assert canned.body["error"]["type"] in str(caught.value)
    assert caught.value.retry_after == (20.0 if canned.status == 429 else None)
    if canned.status == 400:
        assert "context length exceeded" in str(caught.value)


async def test_slow_server_hits_the_timeout(canned_server: CannedServer) -> None:
    """A server slower than the timeout yields a retryable ProviderError."""
    canned_server.queue(Canned(body=reply({"type": "text", "text": "late"}), delay_s=30))
    async with AnthropicProvider(KEY, base_url=canned_server.url, timeout=0.2) as provider:
        with pytest.raises(ProviderError, match=r"0\.2s") as caught:
            await provider.generate(request())
    assert caught.value.kind == "retryable"


async def test_malformed_body_is_retryable() -> None:
    """Through MockTransport: a 200 with an HTML body is retryable and says the body is bad."""
    transport = httpx.MockTransport(lambda r: httpx.Response(200, text="<html>hi</html>"))
    async with AnthropicProvider(KEY, transport=transport) as provider:
        with pytest.raises(ProviderError, match="not a JSON object") as caught:
            await provider.generate(request())
    assert caught.value.kind == "retryable" and caught.value.status == 200


async def test_key_from_env_and_never_shown() -> None:
    """The key is read from ANTHROPIC_API_KEY and appears in no repr, description or error."""
    sent: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        sent.append(r.headers["x-api-key"])
        return httpx.Response(401, json={"type": "error", "error": {
            "type": "authentication_error", "message": f"bad key {r.headers['x-api-key']}"}})

    provider = AnthropicProvider(env={"ANTHROPIC_API_KEY": KEY},
                                 transport=httpx.MockTransport(handler))
    with pytest.raises(ProviderError) as caught:
        await provider.generate(request())
    await provider.aclose()
    assert sent == [KEY]
    shown = " ".join([repr(provider), provider.description, repr(vars(provider)),
                      str(caught.value), repr(caught.value)])
    assert KEY not in shown and "bad key ***" in shown


async def test_tool_round_through_mock_transport() -> None:
    """With real tools, a tool_use reply comes back as a ToolCall and the body offers both."""
    bodies: list[dict[str, Any]] = []

    def handler(r: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(r.content))
        return httpx.Response(200, json=reply(
            {"type": "tool_use", "id": "toolu_9", "name": "lookup", "input": {"id": "9"}}))

    async with AnthropicProvider(KEY, transport=httpx.MockTransport(handler)) as provider:
        response = await provider.generate(request(tools=True))
    assert response.tool_calls == [ToolCall(id="toolu_9", name="lookup", arguments={"id": "9"})]
    assert response.json is None
    assert bodies[0]["tool_choice"] == {"type": "any"}


def test_a_long_fixed_system_prompt_gets_a_cache_breakpoint() -> None:
    """A system prompt fixed for the agent (``turn_sections_at`` set) long enough for the
    Messages API's cache is sent as a text block with an ephemeral cache_control, followed by
    this turn's sections as a second block (the same text as built, the messages unchanged); a
    short one, or a request without the split, stays a plain string."""
    fixed = "## Identity\nYou are Ana.\n\n## Knowledge base\n" + "Opening hours. " * 400
    laid = ModelRequest(schema_name="speak", system=fixed + "\n\n## Guideline\nBook it.",
                        turn_sections_at=len(fixed) + 2,
                        messages=[ChatMessage(role="user", text="oi")])
    body = messages_body(laid, model="claude-sonnet", max_tokens=10, prompt_cache=True)
    assert body["system"] == [{"type": "text", "text": fixed.rstrip(),
                               "cache_control": {"type": "ephemeral"}},
                              {"type": "text", "text": "## Guideline\nBook it."}]
    assert body["messages"][-1]["content"][-1]["text"] == "oi"
    haiku = messages_body(laid, model="claude-3-5-haiku-latest", max_tokens=10,
                          prompt_cache=True)
    assert haiku["system"] == laid.system  # 6,000 chars: under Haiku's 2,048-token minimum
    unsplit = laid.model_copy(update={"turn_sections_at": None})
    assert isinstance(messages_body(unsplit, model="claude-sonnet", max_tokens=10,
                                    prompt_cache=True)["system"], str)
    short = ModelRequest(schema_name="speak", system="## Identity\nAna\n\n## Guideline\nGo.",
                         turn_sections_at=len("## Identity\nAna") + 2)
    short_body = messages_body(short, model="claude-sonnet", max_tokens=10, prompt_cache=True)
    assert short_body["system"] == short.system


def test_without_the_prompt_cache_the_prompt_is_sent_as_built() -> None:
    """With prompt caching not asked for (the default), a request with the split goes out as
    the engine built it: the whole system text as the system prompt, no breakpoint, the
    messages unchanged."""
    fixed = "## Identity\nYou are Ana.\n\n## Knowledge base\n" + "Opening hours. " * 400
    whole = fixed + "\n\n## Guideline\nBook it."
    laid = ModelRequest(schema_name="speak", system=whole, turn_sections_at=len(fixed) + 2,
                        messages=[ChatMessage(role="user", text="oi")])
    body = messages_body(laid, model="claude-sonnet", max_tokens=10)
    assert body["system"] == whole
    assert body["messages"][-1]["content"][-1]["text"] == "oi"
