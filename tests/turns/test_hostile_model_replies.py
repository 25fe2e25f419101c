"""Hostile model replies through the consumer: a server that answers 200 with a reply far
larger than its token cap allows (3,000,000 characters, ``finish_reason: "stop"``), next to
conversations it answers normally, and customers who paste documents into the history.

The real ``ConsumerService`` runs the turns on a real database with an ``OpenAIProvider``
whose HTTP transport is the stand-in model below, so the reply goes through the provider's
own parsing, the engine's speak phase, the consumer's retry and fallback, the turn log and the
next turn's prompt.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from aiokafka.structs import TopicPartition

from engine import Agent
from engine.history import MAX_HISTORY_ENTRY_CHARS
from engine.providers.http import MAX_REPLY_BYTES
from engine.providers.openai import OpenAIProvider
from store import Store
from tests.consumer.fakes import FakeKafkaConsumer
from tests.fixtures.stand_in_model import last_customer_words, reply_for
from tests.turns.test_service_bursts import DlqProducer, run_until, service_on

FALLBACK = "Sorry, the assistant is unavailable right now."
GIANT = "x" * 3_000_000
PASTED = "lorem ipsum " * 4_000 + "end"  # 48,003 characters, a document pasted by a customer
TPS = [TopicPartition("in", 0), TopicPartition("in", 1)]


class StandInModel:
    """Answers chat completions as a temperature-0 model; a speak call whose last customer
    words hold ``giant`` gets a 3,000,000-character message with ``finish_reason: "stop"``.
    Keeps each request's size and last customer words."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, int, list[int]]] = []  # kind, said, bytes, lengths

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        kind = body["response_format"]["json_schema"]["name"]
        said = last_customer_words(body)
        lengths = [len(m["content"]) for m in body["messages"] if isinstance(m["content"], str)]
        self.requests.append((kind, said, len(request.content), lengths))
        content = reply_for(body, None, None)
        if kind == "speak" and "giant" in said:  # the envelope asked for, its message giant
            content = json.dumps({**json.loads(content), "message": GIANT})
        return httpx.Response(200, json={
            "choices": [{"message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1024},
        })


def model_agent(model: StandInModel) -> Agent:
    provider = OpenAIProvider(api_key="test", model="stand-in", base_url="http://model/v1",
                              max_tokens=1024, env={},
                              transport=httpx.MockTransport(model.handle))
    flows = [{"id": "pizza", "on": [{"message": ["a pizza"]}],
              "steps": [{"id": "p", "say": "pizza"}]}]
    return Agent(name="Eco", provider=provider, flows=flows)


def _message(session_id: str, text: str) -> tuple[bytes, bytes]:
    body = {"session_id": session_id, "message": text, "id": f"{session_id}/{text[:20]}"}
    return session_id.encode(), json.dumps(body).encode()


def _replies(producer: DlqProducer, session_id: str) -> list[str]:
    return [json.loads(v)["text"] for topic, key, v in producer.sent
            if topic == "out.m" and key == session_id.encode()]


async def test_an_oversized_reply_is_a_failed_call_and_never_reaches_the_history(
    store: Store,
) -> None:
    """Twelve conversations on two partitions; in three, the model answers one message with
    3,000,000 characters and ``finish_reason: "stop"`` although ``max_tokens`` is 1,024; in
    two, the customer pastes a 48,000-character document. The oversized reply is retried and
    then the fallback message answers it; nothing is dead-lettered; no stored turn holds it;
    the conversation's next message is answered normally with a prompt of normal size; the
    pasted document reaches later prompts cut to the history entry bound; the other
    conversations get exactly their own echoes."""
    model = StandInModel()
    sessions = [f"c{n}" for n in range(12)]
    giants, pasters = set(sessions[:3]), set(sessions[3:5])
    consumer = FakeKafkaConsumer(TPS)
    for n, session in enumerate(sessions):
        middle = "giant please" if session in giants else PASTED if session in pasters else "m1"
        for text in ("hello", middle, "after"):
            consumer.append(TPS[n % 2], *_message(session, text))
    producer = DlqProducer()
    service = service_on(consumer, model_agent(model), producer, store,  # type: ignore[arg-type]
                         merge_bursts=False, max_retries=1, retry_backoff_ms=0,
                         retry_backoff_max_ms=0, model_fallback_message=FALLBACK)
    await run_until(service, lambda: all(consumer.committed(tp) == 18 for tp in TPS),
                    "both partitions are committed")

    assert [topic for topic, _k, _v in producer.sent if topic.endswith("dlq")] == []
    for session in sessions:
        middle = (FALLBACK if session in giants
                  else f"echo: {PASTED.splitlines()[-1]}" if session in pasters else "echo: m1")
        assert _replies(producer, session) == ["echo: hello", middle, "echo: after"], session
    giant_calls = [r for r in model.requests if r[0] == "speak" and "giant" in r[1]]
    assert len(giant_calls) == 3 * 2  # each tried, retried once, then the fallback
    logged = await store.logged_turns(sessions)
    texts = [json.dumps(turn.messages) for turn in logged]
    assert max(len(t) for t in texts) < 120_000  # the pasted document and its echo, never the giant
    assert not any("xxxxxxxxxx" in t for t in texts)
    after = [r for r in model.requests if r[1] == "after"]
    assert len(after) == 12 * 2  # understand and speak, once each, for every conversation
    assert max(size for _k, _s, size, _l in after) < MAX_REPLY_BYTES // 4
    for _kind, _said, _size, lengths in after:
        assert max(lengths[1:]) <= MAX_HISTORY_ENTRY_CHARS + 60  # the system prompt aside


def test_the_reply_limit_follows_the_token_cap() -> None:
    """1,024 tokens allow a body of at most 80 KB; no cap, or a huge one, at most 256 KB."""
    from engine.providers.http import reply_byte_limit

    assert reply_byte_limit(1024) == 1024 * 64 + 16 * 1024
    assert reply_byte_limit(None) == reply_byte_limit(10**9) == MAX_REPLY_BYTES


def _openai_body(message: str) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant",
                                     "content": json.dumps({"message": message})},
                         "finish_reason": "stop"}]}


def _anthropic_body(message: str) -> dict[str, Any]:
    return {"content": [{"type": "tool_use", "id": "t1", "name": "speak_envelope",
                         "input": {"message": message}}],
            "stop_reason": "end_turn"}


@pytest.mark.parametrize("build", ["openai", "anthropic"])
async def test_each_http_provider_refuses_a_body_its_token_cap_cannot_produce(
    build: str,
) -> None:
    """A 200 body of 3,000,000 characters with a stop reason that says the reply is complete
    is an ``UnusableReply`` (a retryable failed call) for both providers; a reply as long as
    the cap allows is taken."""
    from engine import UnusableReply
    from engine.providers.anthropic import AnthropicProvider
    from engine.providers.base import ModelRequest

    def provider(message: str) -> Any:
        body = _openai_body(message) if build == "openai" else _anthropic_body(message)
        transport = httpx.MockTransport(lambda _request: httpx.Response(200, json=body))
        if build == "openai":
            return OpenAIProvider(api_key="k", base_url="http://m/v1", max_tokens=1024, env={},
                                  transport=transport)
        return AnthropicProvider(api_key="k", base_url="http://m", max_tokens=1024, env={},
                                 transport=transport)

    request = ModelRequest(schema_name="speak", system="s", json_schema={
        "type": "object", "properties": {"message": {"type": ["string", "null"]}}})
    with pytest.raises(UnusableReply, match="over the 81920"):
        await provider(GIANT).generate(request)
    fine = await provider("y" * 4_000).generate(request)
    assert fine.json == {"message": "y" * 4_000}


async def test_the_speaker_refuses_an_overlong_message_from_any_provider() -> None:
    """A provider of the host's own that hands back a 3,000,000-character message (no HTTP
    limit in its way) gets a deferred, unusable reply: never said, so never stored."""
    from engine import FakeClock, ModelResponse, UnusableReply

    class Runaway:
        calls = 0

        async def generate(self, request: Any) -> ModelResponse:
            self.calls += 1
            if request.schema_name == "understand":
                return ModelResponse(json={})
            return ModelResponse(json={"message": GIANT})

    runaway = Runaway()
    agent = Agent(name="Eco", provider=runaway, clock=FakeClock("2026-01-05T09:00:00Z"),
                  flows=[{"id": "pizza", "on": [{"message": ["a pizza"]}],
                          "steps": [{"id": "p", "say": "pizza"}]}])
    # The idle speaker's failed call leaves the turn as an unusable reply: the consumer
    # retries it, then answers with the fallback message (the test above).
    with pytest.raises(UnusableReply, match="3000000 characters, over 100000"):
        await agent.turn({"session_id": "s1", "message": "hello"})
    assert runaway.calls == 2  # understand, then the one speak call
