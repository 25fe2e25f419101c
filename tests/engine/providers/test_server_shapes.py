"""What real OpenAI-compatible and Anthropic servers require of a request, and how a reply they
cut off, a reply that is not JSON, or a request shape they refuse is handled."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.envelopes import parse_speak
from engine.errors import ProviderError
from engine.providers import AnthropicProvider, OpenAIProvider
from engine.providers.anthropic import messages_body, parse_message
from engine.providers.base import (
    ChatMessage,
    ImagePart,
    ModelRequest,
    ModelResponse,
    ToolCall,
)
from engine.providers.http import DETAIL_LIMIT, error_for_status, refused_shape
from engine.providers.openai import NO_NEW_MESSAGE, chat_messages, parse_chat_completion
from tests.engine.providers.conftest import Canned, CannedServer

SCHEMA = {"type": "object", "properties": {"message": {"type": ["string", "null"]}},
          "required": ["message"], "additionalProperties": False}
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def speak(messages: list[ChatMessage]) -> ModelRequest:
    return ModelRequest(schema_name="speak", system="You are Ana.", messages=messages,
                        json_schema=SCHEMA)


def choice(content: str | None, finish: str | None = "stop") -> dict[str, Any]:
    return {"choices": [{"index": 0, "finish_reason": finish,
                         "message": {"role": "assistant", "content": content}}]}


# --- message lists every server takes --------------------------------------------------------

def test_two_assistant_messages_at_the_end_are_merged_and_a_user_turn_follows() -> None:
    """A retry or a timer-driven speak leaves two assistant turns last: they become one, and a
    placeholder user turn ends the list so no server continues the assistant's text."""
    messages = chat_messages("sys", [
        ChatMessage(role="user", text="oi"),
        ChatMessage(role="assistant", text="Olá!"),
        ChatMessage(role="assistant", text="Ainda aí?"),
    ])
    assert messages == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "oi"},
        {"role": "assistant", "content": "Olá!\n\nAinda aí?"},
        {"role": "user", "content": NO_NEW_MESSAGE},
    ]


def test_tool_call_turns_keep_their_shape_and_carry_empty_content() -> None:
    """An assistant tool call is sent with content "" (never null) and its results follow it
    unmerged; text said just before the call joins the call's turn."""
    call = ToolCall(id="t1", name="lookup", arguments={"id": "7"})
    messages = chat_messages("", [
        ChatMessage(role="user", text="pedido 7?"),
        ChatMessage(role="assistant", text="Vou ver."),
        ChatMessage(role="assistant", tool_calls=[call]),
        ChatMessage(role="tool", tool_call_id="t1", text="shipped"),
        ChatMessage(role="tool", tool_call_id="t1", text="again"),
    ])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert messages[1]["content"] == "Vou ver." and messages[1]["tool_calls"][0]["id"] == "t1"
    lone = chat_messages("", [ChatMessage(role="user", text="x"),
                              ChatMessage(role="assistant", tool_calls=[call])])
    assert lone[1]["content"] == ""


def test_a_message_with_images_merges_as_content_parts() -> None:
    """Two user turns in a row, one carrying an image, become one turn of content parts with
    the text and the image in order."""
    image = ImagePart(media_type="image/png", url="https://example.test/a.png")
    messages = chat_messages("", [ChatMessage(role="user", text="oi"),
                                  ChatMessage(role="user", text="veja", images=[image])])
    assert messages == [{"role": "user", "content": [
        {"type": "text", "text": "oi"}, {"type": "text", "text": "veja"},
        {"type": "image_url", "image_url": {"url": "https://example.test/a.png"}}]}]


def test_system_entries_fold_into_the_one_system_message() -> None:
    """A summary carried as a system entry joins the system prompt; the list opens on a user."""
    messages = chat_messages("sys", [ChatMessage(role="system", text="Summary."),
                                     ChatMessage(role="assistant", text="Olá")])
    assert messages[0] == {"role": "system", "content": "sys\n\nSummary."}
    assert [m["role"] for m in messages[1:]] == ["user", "assistant", "user"]


def test_anthropic_merges_two_assistant_turns_at_the_end() -> None:
    """The Messages API gets one assistant turn for two, then a user turn."""
    body = messages_body(speak([ChatMessage(role="user", text="oi"),
                                ChatMessage(role="assistant", text="a"),
                                ChatMessage(role="assistant", text="b")]),
                         model="m", max_tokens=10)
    assert [t["role"] for t in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [{"type": "text", "text": "a"},
                                              {"type": "text", "text": "b"}]


_message = st.builds(
    ChatMessage,
    role=st.sampled_from(["user", "assistant", "tool", "system"]),
    text=st.text(max_size=20),
    tool_call_id=st.none() | st.just("t1"),
    tool_calls=st.lists(st.builds(ToolCall, id=st.just("t1"), name=st.just("lookup")),
                        max_size=1),
    images=st.lists(st.builds(ImagePart, media_type=st.just("image/png"),
                              url=st.just("https://example.test/a.png")), max_size=1),
)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=10), st.lists(_message, max_size=12))
def test_any_conversation_becomes_a_list_servers_accept(system: str,
                                                        conversation: list[ChatMessage]) -> None:
    """Whatever the history: one system entry at most and first, the rest opens on a user turn,
    never two user or two assistant turns in a row, never ends on the assistant, no tool call
    lost."""
    messages = chat_messages(system, conversation)
    rest = messages[1:] if messages[0]["role"] == "system" else messages
    assert all(m["role"] != "system" for m in rest) and rest[0]["role"] == "user"
    for earlier, later in itertools.pairwise(rest):
        assert not (earlier["role"] == later["role"] == "user")
        assert not (earlier["role"] == later["role"] == "assistant")
    assert rest[-1]["role"] != "assistant"
    sent_calls = [c["id"] for m in rest for c in m.get("tool_calls", [])]
    assert len(sent_calls) == sum(len(m.tool_calls) for m in conversation if m.role == "assistant")
    assert all(m["content"] is not None for m in messages)
    json.dumps(messages)


@settings(max_examples=300, deadline=None)
@given(st.lists(_message, max_size=12), st.booleans())
def test_any_conversation_alternates_for_the_messages_api(conversation: list[ChatMessage],
                                                          tools: bool) -> None:
    """Anthropic turns alternate user/assistant, open and end on the user, none is empty."""
    request = ModelRequest(schema_name="speak", system="s", messages=conversation,
                           json_schema=SCHEMA if tools else {})
    turns = messages_body(request, model="m", max_tokens=10)["messages"]
    roles = [t["role"] for t in turns]
    assert roles[0] == roles[-1] == "user"
    assert all(a != b for a, b in itertools.pairwise(roles))
    assert all(t["content"] for t in turns)


# --- replies that are cut off or do not parse ------------------------------------------------

def test_openai_reply_cut_off_at_the_token_limit_is_a_retryable_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """finish_reason "length": a retryable ProviderError naming the cap, logged, even when the
    cut-off text happens to parse, and never quoting the reply."""
    caplog.set_level("WARNING")
    for content in ('{ "message": "Hi! I\'m Ana … I\'m sor', '{"message": "x"}'):
        with pytest.raises(ProviderError) as caught:
            parse_chat_completion(choice(content, "length"), wants_json=True, max_tokens=64)
        assert caught.value.kind == "retryable"
        assert "token limit" in str(caught.value) and "max_tokens 64" in str(caught.value)
        assert "Ana" not in str(caught.value)
    assert any("token limit" in r.getMessage() for r in caplog.records)


def test_anthropic_reply_stopped_at_max_tokens_or_without_envelope_fails() -> None:
    """stop_reason "max_tokens" and a reply lacking the envelope are retryable failures."""
    cut = {"content": [{"type": "text", "text": '{"message": "hal'}], "stop_reason": "max_tokens"}
    with pytest.raises(ProviderError, match="token limit") as caught:
        parse_message(cut, envelope_tool="speak_envelope", max_tokens=5)
    assert caught.value.kind == "retryable"
    prose = {"content": [{"type": "text", "text": "Olá, tudo bem?"}], "stop_reason": "end_turn"}
    with pytest.raises(ProviderError, match="not the JSON object"):
        parse_message(prose, envelope_tool="speak_envelope")
    assert parse_message(prose, envelope_tool=None).text == "Olá, tudo bem?"


def test_json_with_words_around_it_is_still_read() -> None:
    """A server without strict JSON may wrap the object in words; the object is read."""
    reply = parse_chat_completion(choice('Here: {"message": "Oi"} done'), wants_json=True)
    assert reply.json == {"message": "Oi"}


def test_engine_never_speaks_a_broken_envelope() -> None:
    """Text that opens like JSON but does not parse is no message at all; prose still is."""
    assert parse_speak(ModelResponse(text='{ "message": "Hi! I\'m sor')) == (None, {}, [])
    assert parse_speak(ModelResponse(text="```json\n{\"message\": ")) == (None, {}, [])
    assert parse_speak(ModelResponse(text="Olá!")) == ("Olá!", {}, [])


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_reply_with_a_number_json_does_not_define_is_not_json(number: str) -> None:
    """``NaN``, the infinities and numbers past a double are not JSON: a reply holding one, in
    its text or its tool call, is an unusable reply (retryable, like any failed call), never a
    number a flow score or a field could take."""
    content = f'{{"flows": {{"booking": {number}, "faq": 1}}}}'
    with pytest.raises(ProviderError, match="not the JSON object") as caught:
        parse_chat_completion(choice(content), wants_json=True)
    assert caught.value.kind == "retryable"
    envelope = {"content": [{"type": "text", "text": content}], "stop_reason": "end_turn"}
    with pytest.raises(ProviderError, match="not the JSON object"):
        parse_message(envelope, envelope_tool="understand_envelope")
    # Text that opens like JSON but is not: no message at all, as for any broken envelope.
    assert parse_speak(ModelResponse(text=f'{{"message": "hi", "n": {number}}}')) == (None, {}, [])


async def test_an_http_body_holding_nan_is_a_malformed_response() -> None:
    """The body itself (an Anthropic tool call's input is decoded with it) holding ``NaN`` is a
    malformed response: retryable, not a turn that crashes on ``int(nan)``."""
    body = (b'{"content":[{"type":"tool_use","id":"t","name":"understand_envelope",'
            b'"input":{"flows":{"booking":NaN}}}],"stop_reason":"tool_use"}')

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})

    async with AnthropicProvider("k", transport=httpx.MockTransport(handler)) as provider:
        with pytest.raises(ProviderError, match="not a JSON object") as caught:
            await provider.generate(ModelRequest(
                schema_name="understand", system="s", messages=[], json_schema=SCHEMA))
    assert caught.value.kind == "retryable"


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_json, st.builds(choice, st.none() | st.text(max_size=40),
                                  st.sampled_from(["stop", "length", None, "tool_calls"]))),
       st.booleans())
def test_any_chat_completion_body_parses_or_refuses_with_a_reason(body: Any,
                                                                  wants_json: bool) -> None:
    """Any decoded body: a ModelResponse, or a ProviderError with a reason; nothing else."""
    if not isinstance(body, dict):
        body = {"choices": body}
    try:
        response = parse_chat_completion(body, wants_json=wants_json)
    except ProviderError as exc:
        assert str(exc) and exc.kind == "retryable"
    else:
        assert not wants_json or response.json is not None or response.tool_calls


# --- a request shape the server refuses -------------------------------------------------------

LLAMA_CPP_PYTHON_500 = {"error": {"message": "[{'type': 'literal_error', 'loc': ('body', "
                                  "'response_format', 'type'), 'msg': \"Input should be 'text' "
                                  "or 'json_object'\"}]", "type": "internal_server_error"}}


async def test_refused_request_shape_fails_once_as_fatal(
    canned_server: CannedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A 500 whose body says the request is malformed fails fatal at the first call, with the
    server's words and a hint at the json mode, logged by status alone; a plain 500 stays
    retryable."""
    caplog.set_level("WARNING")
    canned_server.queue(Canned(500, LLAMA_CPP_PYTHON_500),
                        Canned(500, {"error": {"message": "out of memory"}}))
    async with OpenAIProvider(base_url=canned_server.url, env={}) as provider:
        with pytest.raises(ProviderError) as refused:
            await provider.generate(speak([ChatMessage(role="user", text="oi")]))
        with pytest.raises(ProviderError) as outage:
            await provider.generate(speak([ChatMessage(role="user", text="oi")]))
    assert refused.value.kind == "fatal" and refused.value.status == 500
    assert "Input should be 'text' or 'json_object'" in str(refused.value)
    assert "TURNFLOW_MODEL_JSON_MODE" in str(refused.value)
    assert outage.value.kind == "retryable"
    assert len(canned_server.received) == 2
    warned = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    assert warned == ["openai: HTTP 500: the server refused the request as malformed; not retried"]


async def test_refused_shape_through_anthropic_is_fatal_too() -> None:
    """The Anthropic provider classifies a refused shape the same way."""
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"error": {"type": "invalid_request_error",
                                                   "message": "messages: roles must alternate"}})

    async with AnthropicProvider("k", transport=httpx.MockTransport(handler)) as provider:
        with pytest.raises(ProviderError) as caught:
            await provider.generate(speak([ChatMessage(role="user", text="oi")]))
    assert caught.value.kind == "fatal"


def test_loading_and_rate_limits_stay_retryable() -> None:
    """llama.cpp's 503 while loading and a 429 that says invalid_request stay retryable."""
    loading = httpx.Response(503, json={"error": {"message": "Loading model",
                                                  "type": "unavailable_error"}})
    limited = httpx.Response(429, json={"error": {"type": "invalid_request_error",
                                                  "message": "slow down"}})
    for response in (loading, limited):
        assert error_for_status(response, provider="p", now=NOW, secrets=()).kind == "retryable"


def test_long_server_explanations_are_kept_up_to_the_bound() -> None:
    """A 1,500-character explanation is kept whole; a huge body is cut at DETAIL_LIMIT."""
    long = "x" * 1500 + " the end"
    kept = error_for_status(httpx.Response(500, json={"error": {"message": long}}),
                            provider="p", now=NOW, secrets=())
    assert "the end" in str(kept)
    huge = error_for_status(httpx.Response(500, text="y" * 100_000), provider="p", now=NOW,
                            secrets=())
    assert DETAIL_LIMIT <= len(str(huge)) < DETAIL_LIMIT + 100


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=400, max_value=599), st.binary(max_size=300))
def test_any_error_body_gives_a_bounded_provider_error(status: int, raw: bytes) -> None:
    """Arbitrary bytes as an error body: a ProviderError of a known kind, detail bounded."""
    error = error_for_status(httpx.Response(status, content=raw), provider="p", now=NOW,
                             secrets=())
    assert error.kind in ("retryable", "fatal") and error.status == status
    assert len(str(error)) < DETAIL_LIMIT + 300
    assert refused_shape(str(error)) in (True, False)
