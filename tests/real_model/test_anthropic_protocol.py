"""The Anthropic provider against a real Messages-API server: llama.cpp's own ``/v1/messages``
(the same server program and model the other real-model tests use, so nothing more is
installed; started once more for this module, so its prompt cache is this module's alone).

What is checked is what such a server does with the provider's requests: the body is taken
(system prompt, merged turns, tools, a forced ``tool_choice``, a replayed tool round), the
whole prompt is counted when part of it comes from the server's prompt cache, and a reply
without the envelope the provider forced is a retryable unusable reply, never text.

The forced envelope tool itself is not honoured here, and no small model shipped in a package
honours it: SmolLM2's chat template has no tools, so llama.cpp offers none and the model writes
prose; the Qwen2.5-Coder instruct models (0.5B and 1.5B, the smallest others in a package)
write the call as bare JSON without the ``<tool_call>`` tags their template asks for, so the
server's parser leaves it as text, and llama.cpp turns a named ``tool_choice`` into
``required``, whose grammar still lets text come first. So the test accepts either outcome
for an envelope request (the envelope fits its schema, or the call fails as unusable) and
says which one it saw.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import jsonschema
import pytest

from engine import ProviderError
from engine.envelopes import speak_schema
from engine.providers import AnthropicProvider
from engine.providers.base import ChatMessage, ModelRequest, ModelResponse, ToolCall
from tests.fixtures.llama_server import MODEL_NAME, LlamaServer, start
from tests.fixtures.servers import servers_unavailable
from tests.real_model.conftest import CALL_TIMEOUT_S, REPLY_CAP, recording
from tests.real_model.test_protocol import LOOKUP

pytestmark = [pytest.mark.real_model, pytest.mark.timeout(900)]

GREETING = [ChatMessage(role="user", text="Hello! Please greet me in one short sentence.")]


class Sent:
    """The bodies the provider posted, in order."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def keep(self, request: httpx.Request) -> None:
        self.bodies.append(json.loads(request.content))


@pytest.fixture(scope="module")
def messages_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """A server of this module's own: what these calls leave in a server's prompt cache changes
    what the tiny model says next, and the other modules' tests must not depend on them."""
    try:
        server = start(tmp_path_factory.mktemp("llama-messages") / "server.log")
    except RuntimeError as exc:
        servers_unavailable(f"llama.cpp server: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def anthropic(messages_server: LlamaServer
                    ) -> AsyncIterator[tuple[AnthropicProvider, Sent]]:
    sent = Sent()
    client = httpx.AsyncClient(timeout=CALL_TIMEOUT_S, event_hooks={"request": [sent.keep]})
    provider = AnthropicProvider(model=MODEL_NAME, base_url=messages_server.url, client=client,
                                 timeout=CALL_TIMEOUT_S, max_tokens=REPLY_CAP, env={})
    try:
        yield provider, sent
    finally:
        await client.aclose()


async def envelope_or_unusable(provider: AnthropicProvider,
                               request: ModelRequest) -> ModelResponse | ProviderError:
    """The reply, or the error it failed with; any failure but a retryable unusable reply (a
    refused body, a server error) fails the test."""
    try:
        return await provider.generate(request)
    except ProviderError as exc:
        assert exc.kind == "retryable" and "unusable reply" in str(exc), exc
        return exc


async def test_the_whole_prompt_is_counted_when_part_of_it_was_cached(
        anthropic: tuple[AnthropicProvider, Sent], messages_server: LlamaServer) -> None:
    """The same prompt three times: each reply counts the same whole prompt in input_tokens,
    the server's OpenAI endpoint counts that many for the same messages, and a repeat reads
    part of it from the cache (the Messages API reports that part apart from input_tokens)."""
    provider, sent = anthropic
    request = ModelRequest(schema_name="speak", system="You are Ana, a bike shop assistant.",
                           messages=GREETING)
    replies = [await provider.generate(request) for _ in range(3)]
    usages = [reply.usage for reply in replies]
    assert all(u is not None for u in usages), usages
    wholes = {u.input_tokens for u in usages if u is not None}
    assert len(wholes) == 1, usages
    (whole,) = wholes
    assert whole is not None and whole > 1
    assert all(reply.text.strip() for reply in replies)
    assert all(u is not None and (u.output_tokens or 0) > 0 for u in usages)
    repeats = [u.cache_read_tokens or 0 for u in usages[1:] if u is not None]
    assert max(repeats) > 0 and all(r < whole for r in repeats), usages
    async for openai in recording(messages_server):
        counted = await openai.generate(request)
        assert counted.usage is not None and counted.usage.input_tokens == whole
    body = sent.bodies[0]
    assert body["system"] == "You are Ana, a bike shop assistant."
    assert "tools" not in body and "tool_choice" not in body


async def test_a_forced_envelope_is_taken_and_fits_or_fails_as_unusable(
        anthropic: tuple[AnthropicProvider, Sent]) -> None:
    """The envelope tool and the forced tool_choice are a body the server takes; the reply is
    the envelope fitting its schema or a retryable unusable reply, never text for the
    customer."""
    provider, sent = anthropic
    schema = speak_schema({})
    request = ModelRequest(schema_name="speak", system="You are Ana of a bike shop.",
                           messages=GREETING, json_schema=schema)
    outcome = await envelope_or_unusable(provider, request)
    if isinstance(outcome, ModelResponse):
        assert outcome.json is not None
        jsonschema.validate(outcome.json, schema)
    print(f"forced envelope with {MODEL_NAME}: "
          f"{'honoured' if isinstance(outcome, ModelResponse) else outcome}")
    (body,) = sent.bodies
    assert body["tool_choice"] == {"type": "tool", "name": "speak_envelope"}
    assert [tool["name"] for tool in body["tools"]] == ["speak_envelope"]


async def test_a_replayed_tool_round_is_a_body_the_server_takes(
        anthropic: tuple[AnthropicProvider, Sent]) -> None:
    """A tool offered beside the envelope, then the round replayed (an assistant tool_use and
    its tool_result in a user turn): both bodies are taken, and each reply is a call of an
    offered tool, the envelope, or a retryable unusable reply."""
    provider, sent = anthropic
    offer = ModelRequest(schema_name="speak", system="You are Ana. Use lookup for orders.",
                         messages=[ChatMessage(role="user", text="where is order 7?")],
                         json_schema=speak_schema({}), tools=[LOOKUP])
    replay = offer.model_copy(update={"messages": [
        *offer.messages,
        ChatMessage(role="assistant", tool_calls=[ToolCall(id="toolu_1", name="lookup",
                                                           arguments={"id": "7"})]),
        ChatMessage(role="tool", tool_call_id="toolu_1", text='{"status": "shipped"}'),
    ]})
    for request in (offer, replay):
        outcome = await envelope_or_unusable(provider, request)
        if isinstance(outcome, ModelResponse):
            assert {call.name for call in outcome.tool_calls} <= {"lookup"}
    first, second = sent.bodies
    assert first["tool_choice"] == {"type": "any"}
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][1]["content"][0]["type"] == "tool_use"
    assert second["messages"][2]["content"][0] == {
        "type": "tool_result", "tool_use_id": "toolu_1", "content": '{"status": "shipped"}'}
