"""OpenAIProvider: request bodies, reply parsing, error classes, against a local server and
httpx's MockTransport."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx
import pytest

from engine.errors import ProviderError
from engine.providers import OpenAIProvider
from engine.providers.base import (
    CallRecord,
    ChatMessage,
    ModelRequest,
    ProviderHooks,
    ToolCall,
    ToolSpec,
    Usage,
)
from engine.providers.openai import (
    DEFAULT_MAX_TOKENS,
    chat_completion_body,
    parse_chat_completion,
)
from tests.engine.providers.conftest import Canned, CannedServer

KEY = "sk-test-SECRET-0123456789"
SCHEMA = {
    "type": "object",
    "properties": {"message": {"type": ["string", "null"]}, "nome": {"type": ["string", "null"]}},
    "required": ["message", "nome"],
    "additionalProperties": False,
}
LOOKUP = ToolSpec(name="lookup", description="Find an order",
                  parameters={"type": "object", "properties": {"id": {"type": "string"}}})


def speak_request(*, schema: bool = True, tools: bool = False) -> ModelRequest:
    return ModelRequest(
        schema_name="speak",
        system="You are Ana.",
        messages=[ChatMessage(role="user", text="oi")],
        json_schema=SCHEMA if schema else {},
        tools=[LOOKUP] if tools else [],
    )


def completion(content: str | None = None, *, tool_calls: list[dict[str, Any]] | None = None,
               usage: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {"id": "c1", "object": "chat.completion",
                            "choices": [{"index": 0, "message": message,
                                         "finish_reason": "stop"}]}
    if usage is not None:
        body["usage"] = usage
    return body


# --- request bodies ------------------------------------------------------------------------

def test_body_with_schema_asks_for_strict_json_schema() -> None:
    """A request with a schema sends response_format json_schema, strict, named after the call."""
    body = chat_completion_body(speak_request(), model="m1")
    assert body["model"] == "m1"
    assert body["messages"] == [{"role": "system", "content": "You are Ana."},
                                {"role": "user", "content": "oi"}]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "speak", "strict": True, "schema": SCHEMA},
    }
    assert "tools" not in body


def test_body_without_schema_or_tools_is_plain_chat() -> None:
    """No schema and no tools: neither response_format nor tools is sent."""
    body = chat_completion_body(speak_request(schema=False), model="m1")
    assert "response_format" not in body and "tools" not in body


def test_body_json_modes_for_servers_without_json_schema() -> None:
    """json_object_schema carries the schema in a json_object, json_object asks for any JSON
    object, none leaves the schema to the prompt."""
    with_schema = chat_completion_body(speak_request(), model="m", json_mode="json_object_schema")
    as_object = chat_completion_body(speak_request(), model="m", json_mode="json_object")
    by_prompt = chat_completion_body(speak_request(), model="m", json_mode="none")
    assert with_schema["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert as_object["response_format"] == {"type": "json_object"}
    assert "response_format" not in by_prompt
    assert parse_chat_completion(completion('{"message": "x", "nome": null}'),
                                 wants_json=True).json == {"message": "x", "nome": None}


def test_body_with_tools_sends_function_tools() -> None:
    """Tools go out as type function with name, description and parameters."""
    body = chat_completion_body(speak_request(tools=True), model="m1", max_tokens=50,
                                temperature=0.0)
    assert body["tools"] == [{"type": "function", "function": {
        "name": "lookup", "description": "Find an order", "parameters": LOOKUP.parameters}}]
    assert body["tool_choice"] == "auto"
    assert (body["max_tokens"], body["temperature"]) == (50, 0.0)


def test_body_replays_tool_rounds() -> None:
    """An assistant tool call and its tool result are sent in the chat-completions shape."""
    request = ModelRequest(schema_name="speak", system="", messages=[
        ChatMessage(role="user", text="where is 7?"),
        ChatMessage(role="assistant", tool_calls=[ToolCall(id="t1", name="lookup",
                                                           arguments={"id": "7"})]),
        ChatMessage(role="tool", tool_call_id="t1", text='{"status": "shipped"}'),
    ])
    messages = chat_completion_body(request, model="m")["messages"]
    assert messages[1] == {"role": "assistant", "content": "", "tool_calls": [
        {"id": "t1", "type": "function",
         "function": {"name": "lookup", "arguments": '{"id": "7"}'}}]}
    assert messages[2] == {"role": "tool", "tool_call_id": "t1",
                           "content": '{"status": "shipped"}'}
    assert messages[0]["role"] == "user"  # an empty system prompt is not sent


# --- parsing -------------------------------------------------------------------------------

def test_parse_text_reply() -> None:
    """Plain content becomes text; no JSON is read when none was asked for."""
    response = parse_chat_completion(completion('{"a": 1}'), wants_json=False)
    assert response.text == '{"a": 1}' and response.json is None


def test_parse_json_reply_and_usage() -> None:
    """With a schema, the content is decoded into json and token usage is kept."""
    response = parse_chat_completion(
        completion('{"message": "Olá!", "nome": null}',
                   usage={"prompt_tokens": 12, "completion_tokens": 5}),
        wants_json=True,
    )
    assert response.json == {"message": "Olá!", "nome": None}
    assert response.usage == Usage(input_tokens=12, output_tokens=5)


def test_cached_prompt_tokens_are_kept_apart_from_the_whole_prompt() -> None:
    """``prompt_tokens`` already counts the cached part; ``cached_tokens`` (as llama.cpp's
    server and OpenAI report it) is kept as what was read from the cache. Details that are not
    a count leave it unknown."""
    recorded = {"completion_tokens": 23, "prompt_tokens": 19, "total_tokens": 42,
                "prompt_tokens_details": {"cached_tokens": 18}}
    response = parse_chat_completion(completion('{"message": "Hi"}', usage=recorded),
                                     wants_json=True)
    assert response.usage == Usage(input_tokens=19, output_tokens=23, cache_read_tokens=18)
    for details in ({"cached_tokens": "18"}, {"cached_tokens": True}, [], None):
        body = completion('{"message": "Hi"}', usage={"prompt_tokens": 19,
                                                      "completion_tokens": 2,
                                                      "prompt_tokens_details": details})
        assert parse_chat_completion(body, wants_json=True).usage == Usage(input_tokens=19,
                                                                           output_tokens=2)


def test_parse_non_json_content_is_a_retryable_failure() -> None:
    """Content that is not the JSON object asked for fails the call, retryable, without
    quoting the reply; without a schema the same text is a plain reply."""
    with pytest.raises(ProviderError) as caught:
        parse_chat_completion(completion("sorry, no JSON"), wants_json=True)
    assert caught.value.kind == "retryable" and "sorry" not in str(caught.value)
    assert "not the JSON object" in str(caught.value)
    assert parse_chat_completion(completion("sorry, no JSON"), wants_json=False).text == (
        "sorry, no JSON")


def test_parse_tool_calls_including_malformed_arguments(caplog: pytest.LogCaptureFixture) -> None:
    """Tool calls are parsed; arguments that are not a JSON object become {} with a warning."""
    caplog.set_level(logging.WARNING)
    response = parse_chat_completion(completion(None, tool_calls=[
        {"id": "a", "type": "function", "function": {"name": "lookup", "arguments": '{"id":"7"}'}},
        {"id": "b", "type": "function", "function": {"name": "lookup", "arguments": '{"id": '}},
        {"id": "c", "type": "function", "function": {"name": "lookup", "arguments": "[1]"}},
        {"type": "function", "function": {"name": "ping", "arguments": ""}},
        {"id": "e", "type": "function", "function": {"arguments": "{}"}},
    ]), wants_json=True)
    assert response.tool_calls == [
        ToolCall(id="a", name="lookup", arguments={"id": "7"}),
        ToolCall(id="b", name="lookup", arguments={}),
        ToolCall(id="c", name="lookup", arguments={}),
        ToolCall(id="call_3", name="ping", arguments={}),
    ]
    assert response.text == "" and response.json is None
    assert sum("not a JSON object" in r.getMessage() for r in caplog.records) == 2


def test_parse_content_parts() -> None:
    """A content list of text parts (some compatible servers) is joined into the text."""
    body = completion(None)
    body["choices"][0]["message"]["content"] = [{"type": "text", "text": '{"a":'},
                                                {"type": "text", "text": " 2}"}]
    assert parse_chat_completion(body, wants_json=True).json == {"a": 2}


@pytest.mark.parametrize("body", [{}, {"choices": []}, {"choices": ["x"]},
                                  {"choices": [{"message": "hi"}]}])
def test_parse_body_without_message_is_retryable(body: dict[str, Any]) -> None:
    """A 200 body without a first choice message is a retryable malformed response."""
    with pytest.raises(ProviderError, match="malformed response") as caught:
        parse_chat_completion(body, wants_json=False)
    assert caught.value.kind == "retryable"


def test_body_asks_llama_cpp_to_cache_the_prompt_only_when_set() -> None:
    """prompt_cache="llama.cpp" adds cache_prompt: true; the default adds no field a strict
    server could refuse, and the messages are the same either way."""
    plain = chat_completion_body(speak_request(), model="m")
    cached = chat_completion_body(speak_request(), model="m", prompt_cache="llama.cpp")
    assert "cache_prompt" not in plain
    assert cached.pop("cache_prompt") is True
    assert cached == plain


async def test_provider_sends_cache_prompt_and_reads_cached_tokens(
    canned_server: CannedServer,
) -> None:
    """An OpenAIProvider set to llama.cpp's prompt cache sends cache_prompt on every call and
    reports the server's cached prompt tokens in the call's usage."""
    canned_server.queue(Canned(body=completion(
        '{"message": "Oi!", "nome": null}',
        usage={"prompt_tokens": 90, "completion_tokens": 3,
               "prompt_tokens_details": {"cached_tokens": 80}})))
    records: list[CallRecord] = []
    async with OpenAIProvider(model="local", base_url=canned_server.url + "/v1",
                              prompt_cache="llama.cpp", env={},
                              hooks=ProviderHooks([records.append])) as provider:
        await provider.generate(speak_request())
    [received] = canned_server.received
    assert received.body["cache_prompt"] is True
    [record] = records
    assert record.usage is not None and record.usage.cache_read_tokens == 80


def test_prompt_cache_key_is_one_per_fixed_system_prompt_and_model() -> None:
    """prompt_cache="key" sends one prompt_cache_key for every request sharing the fixed system
    prompt and model, whatever the turn and history; another prefix or model gets another key;
    a request without the split, or the default mode, sends none."""
    fixed = "## Identity\nYou are Ana."

    def laid(turn: str, said: str) -> ModelRequest:
        return ModelRequest(schema_name="speak", system=f"{fixed}\n\n{turn}",
                            turn_sections_at=len(fixed) + 2,
                            messages=[ChatMessage(role="user", text=said)])

    def key(request: ModelRequest, model: str = "m") -> Any:
        return chat_completion_body(request, model=model, prompt_cache="key").get(
            "prompt_cache_key")

    first, second = key(laid("## Guideline\nA", "oi")), key(laid("## Guideline\nB", "tchau"))
    assert first == second and first.startswith("tf-") and len(first) == 35
    other_agent = laid("## Guideline\nA", "oi").model_copy(
        update={"system": "## Identity\nYou are Bob.\n\n## Guideline\nA"})
    assert key(other_agent) != first and key(laid("## Guideline\nA", "oi"), "m2") != first
    assert key(speak_request()) is None
    assert "prompt_cache_key" not in chat_completion_body(laid("## G\nA", "oi"), model="m")


# --- against a real local server -----------------------------------------------------------

async def test_round_trip_against_local_server(canned_server: CannedServer) -> None:
    """The provider POSTs to base_url/chat/completions with the key and returns the envelope."""
    canned_server.queue(Canned(body=completion('{"message": "Oi!", "nome": "Ana"}',
                                               usage={"prompt_tokens": 9,
                                                      "completion_tokens": 3})
                               | {"model": "local-model-0613"}))
    records: list[CallRecord] = []
    async with OpenAIProvider(KEY, model="local-model", base_url=canned_server.url + "/v1",
                              hooks=ProviderHooks([records.append])) as provider:
        response = await provider.generate(speak_request(tools=True))
    assert response.json == {"message": "Oi!", "nome": "Ana"}
    [received] = canned_server.received
    assert received.path == "/v1/chat/completions"
    assert received.headers["authorization"] == f"Bearer {KEY}"
    assert received.body["model"] == "local-model"
    assert received.body["response_format"]["json_schema"]["schema"] == SCHEMA
    assert received.body["tools"][0]["function"]["name"] == "lookup"
    [record] = records
    assert (record.provider, record.schema_name, record.ok) == ("openai", "speak", True)
    assert record.usage == Usage(input_tokens=9, output_tokens=3)
    # The hooks see the model asked for and, on the response, the one that answered.
    assert record.model == "local-model" and record.response is response
    assert response.model == "local-model-0613" and record.request is not None


async def test_tool_call_reply_from_local_server(canned_server: CannedServer) -> None:
    """A reply asking for a tool comes back as ToolCall values."""
    canned_server.queue(Canned(body=completion(None, tool_calls=[
        {"id": "call_1", "type": "function",
         "function": {"name": "lookup", "arguments": '{"id": "42"}'}}])))
    async with OpenAIProvider(KEY, base_url=canned_server.url) as provider:
        response = await provider.generate(speak_request(tools=True))
    assert response.tool_calls == [ToolCall(id="call_1", name="lookup", arguments={"id": "42"})]


@pytest.mark.parametrize(
    ("canned", "kind", "retry_after"),
    [
        (Canned(429, {"error": {"message": "slow down"}}, {"Retry-After": "3"}), "retryable", 3.0),
        (Canned(500, {"error": {"message": "oops"}}), "retryable", None),
        (Canned(502, raw=b"<html>bad gateway</html>"), "retryable", None),
        (Canned(503, {"error": "overloaded"}, {"Retry-After": "Mon, 05 Jan 2099 09:00:00 GMT"}),
         "retryable", "future"),
        (Canned(401, {"error": {"message": "invalid key"}}), "fatal", None),
        (Canned(403, {"error": {"message": "forbidden"}}), "fatal", None),
        (Canned(400, {"error": {"code": "context_length_exceeded",
                                "message": "maximum context length is 8192 tokens"}}),
         "fatal", None),
        (Canned(404, {"error": {"message": "model not found"}}), "fatal", None),
    ],
)
async def test_error_statuses_from_local_server(
    canned_server: CannedServer, canned: Canned, kind: str, retry_after: float | str | None
) -> None:
    """Each error status maps to its ProviderError kind, status and Retry-After."""
    canned_server.queue(canned)
    records: list[CallRecord] = []
    async with OpenAIProvider(KEY, base_url=canned_server.url,
                              hooks=ProviderHooks([records.append])) as provider:
        with pytest.raises(ProviderError) as caught:
            await provider.generate(speak_request())
    error = caught.value
    assert (error.kind, error.status) == (kind, canned.status)
    if retry_after == "future":
        assert error.retry_after is not None and error.retry_after > 3600
    else:
        assert error.retry_after == retry_after
    assert f"HTTP {canned.status}" in str(error)
    assert [(r.ok, r.error_kind, r.error_type) for r in records] == [
        (False, kind, "ProviderError")]


async def test_malformed_200_body_is_retryable(canned_server: CannedServer) -> None:
    """A 200 that is not JSON, and one that is JSON without choices, are retryable and say why."""
    canned_server.queue(Canned(raw=b"not json at all"), Canned(body={"object": "list"}))
    async with OpenAIProvider(KEY, base_url=canned_server.url) as provider:
        for expected in ("body is not a JSON object", "no choices"):
            with pytest.raises(ProviderError, match=expected) as caught:
                await provider.generate(speak_request())
            assert caught.value.kind == "retryable"


async def test_slow_server_hits_the_timeout(canned_server: CannedServer) -> None:
    """A server slower than the timeout yields a retryable ProviderError naming the timeout."""
    canned_server.queue(Canned(body=completion("late"), delay_s=30))
    async with OpenAIProvider(KEY, base_url=canned_server.url, timeout=0.2) as provider:
        with pytest.raises(ProviderError, match=r"0\.2s") as caught:
            await provider.generate(speak_request())
    assert caught.value.kind == "retryable" and caught.value.status is None


async def test_connection_refused_is_retryable(canned_server: CannedServer) -> None:
    """Nothing listening on the port is a retryable connection error."""
    url = canned_server.url
    canned_server.stop()
    async with OpenAIProvider(KEY, base_url=url, timeout=5) as provider:
        with pytest.raises(ProviderError, match="ConnectError") as caught:
            await provider.generate(speak_request())
    assert caught.value.kind == "retryable"


async def test_key_never_in_repr_or_errors(canned_server: CannedServer) -> None:
    """The key shows in no repr, description, or error text, even when the API echoes it."""
    canned_server.queue(Canned(401, {"error": {"message": f"Incorrect API key provided: {KEY}"}}))
    provider = OpenAIProvider(KEY, base_url=canned_server.url)
    shown = [repr(provider), str(provider), provider.description, repr(vars(provider))]
    with pytest.raises(ProviderError) as caught:
        await provider.generate(speak_request())
    await provider.aclose()
    shown += [str(caught.value), repr(caught.value)]
    assert caught.value.__cause__ is None
    assert all(KEY not in text for text in shown)
    assert "Incorrect API key provided: ***" in str(caught.value)


async def test_key_never_in_logs(canned_server: CannedServer,
                                  caplog: pytest.LogCaptureFixture) -> None:
    """With every logger at DEBUG (httpx and httpcore included), no record carries the key."""
    caplog.set_level(logging.DEBUG)
    canned_server.queue(
        Canned(body=completion(None, tool_calls=[
            {"id": "x", "type": "function", "function": {"name": "lookup", "arguments": "{"}}])),
        Canned(401, {"error": {"message": f"bad key {KEY}"}}),
    )
    async with OpenAIProvider(KEY, base_url=canned_server.url) as provider:
        await provider.generate(speak_request(tools=True))
        with pytest.raises(ProviderError):
            await provider.generate(speak_request())
    assert len(caplog.records) > 3  # the HTTP stack did log the calls
    assert all(KEY not in record.getMessage() for record in caplog.records)


def test_key_that_cannot_be_a_header_is_rejected_without_echo() -> None:
    """A key with a line break inside is refused at construction, and the error omits it."""
    with pytest.raises(ValueError, match="cannot be sent") as caught:
        OpenAIProvider("sk-bad\nkey-0123456789")
    assert "sk-bad" not in str(caught.value)


async def test_connection_error_text_is_scrubbed_of_the_key() -> None:
    """A transport error whose message carries the key reaches the caller masked."""
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"proxy rejected {request.headers['authorization']}")

    async with OpenAIProvider(KEY, transport=httpx.MockTransport(handler)) as provider:
        with pytest.raises(ProviderError) as caught:
            await provider.generate(speak_request())
    assert caught.value.kind == "retryable"
    assert KEY not in str(caught.value) and "Bearer ***" in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_key_whitespace_is_trimmed() -> None:
    """A key read from a file with its trailing newline is sent without it."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["authorization"])
        return httpx.Response(200, json=completion("hi"))

    async def run() -> None:
        async with OpenAIProvider("k-123\n", transport=httpx.MockTransport(handler)) as provider:
            await provider.generate(speak_request(schema=False))

    asyncio.run(run())
    assert seen == ["Bearer k-123"]


def test_key_from_environment() -> None:
    """With no key given, TURNFLOW_MODEL_API_KEY wins over OPENAI_API_KEY; none sends no header."""
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(200, json=completion("hi"))

    async def run(env: dict[str, str]) -> None:
        async with OpenAIProvider(env=env, transport=httpx.MockTransport(handler)) as provider:
            await provider.generate(speak_request(schema=False))

    asyncio.run(run({"TURNFLOW_MODEL_API_KEY": "k1", "OPENAI_API_KEY": "k2"}))
    asyncio.run(run({"OPENAI_API_KEY": "k2"}))
    asyncio.run(run({}))
    assert seen == ["Bearer k1", "Bearer k2", None]


# --- MockTransport -------------------------------------------------------------------------

async def test_mock_transport_body_and_text_reply() -> None:
    """Through MockTransport: the body carries no schema or tools when absent; text comes back."""
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=completion("Olá"))

    async with OpenAIProvider(KEY, transport=httpx.MockTransport(handler)) as provider:
        response = await provider.generate(speak_request(schema=False))
    assert response.text == "Olá" and response.json is None
    assert set(bodies[0]) == {"model", "messages", "max_tokens"}
    assert bodies[0]["max_tokens"] == DEFAULT_MAX_TOKENS


async def test_mock_transport_network_errors_are_retryable() -> None:
    """Read errors and read timeouts raised by the transport are retryable."""
    for exc in (httpx.ReadError("reset"), httpx.ReadTimeout("slow"),
                httpx.RemoteProtocolError("bad framing")):
        def handler(request: httpx.Request, exc: Exception = exc) -> httpx.Response:
            raise exc

        async with OpenAIProvider(KEY, transport=httpx.MockTransport(handler)) as provider:
            with pytest.raises(ProviderError) as caught:
                await provider.generate(speak_request())
        assert caught.value.kind == "retryable", exc


async def test_shared_client_is_not_closed() -> None:
    """A client passed in is used as is and left open for its owner."""
    client = httpx.AsyncClient(transport=httpx.MockTransport(
        lambda request: httpx.Response(200, json=completion("x"))))
    provider = OpenAIProvider(KEY, client=client)
    assert (await provider.generate(speak_request(schema=False))).text == "x"
    await provider.aclose()
    assert not client.is_closed
    await client.aclose()
