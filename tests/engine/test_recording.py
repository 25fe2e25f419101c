"""Recording the model's side of a turn: calls by kind with their parsed replies, the clock."""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import UTC
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine import Agent, FakeClock, MockProvider, ModelRequest, ModelResponse, ProviderError
from engine.providers.base import ToolCall, Usage
from engine.recording import (
    RecordingProvider,
    fields_written,
    recorded_agent,
    state_digest,
    taping,
)

FLOWS: list[dict[str, Any]] = [
    {
        "id": "order",
        "on": [{"message": ["order", "buy"]}],
        "steps": [
            {"id": "ask", "collect": ["size"], "prompt": "Ask the size."},
            {"id": "done", "say": "Size {{size}} noted."},
        ],
    },
    {"id": "hours", "on": [{"message": ["hours"]}], "steps": [{"id": "h", "say": "9 to 5."}]},
]
FIELDS = {"size": {"type": "string", "enum": ["S", "M", "L"]}}


def _agent(provider: Any, clock: FakeClock | None = None) -> Agent:
    return Agent(name="Bo", provider=provider, clock=clock or FakeClock(), flows=FLOWS,
                 fields=FIELDS)


def _request(name: str) -> ModelRequest:
    return ModelRequest(schema_name="understand", system="s", meta={"m": name})  # type: ignore[arg-type]


async def test_each_call_inside_a_tape_is_recorded_with_kind_reply_and_tokens() -> None:
    """A call made while a tape is open is kept with its kind, envelope, tool calls and usage."""
    reply = ModelResponse(json={"flows": {"order": 90}}, usage=Usage(input_tokens=12,
                          output_tokens=3), tool_calls=[ToolCall(id="t1", name="look")])
    provider = RecordingProvider(MockProvider([reply]))
    with taping("envelopes") as tape:
        await provider.generate(_request("x"))
    [call] = tape.calls
    assert call["kind"] == "understand" and call["ok"] is True
    assert call["reply"]["json"] == {"flows": {"order": 90}}
    assert call["reply"]["tool_calls"] == [{"id": "t1", "name": "look", "arguments": {}}]
    assert (call["input_tokens"], call["output_tokens"]) == (12, 3)
    assert call["latency_ms"] >= 0 and "prompt" not in call


async def test_cached_prompt_tokens_are_recorded_only_where_the_server_reports_them() -> None:
    """A reply whose usage counts prompt tokens read from the server's cache keeps that count
    on its call; one without it records no such key."""
    cached = ModelResponse(json={"a": 1}, usage=Usage(input_tokens=900, output_tokens=4,
                                                      cache_read_tokens=850))
    plain = ModelResponse(json={"a": 2}, usage=Usage(input_tokens=90, output_tokens=4))
    provider = RecordingProvider(MockProvider([cached, plain]))
    with taping("envelopes") as tape:
        await provider.generate(_request("x"))
        await provider.generate(_request("y"))
    first, second = tape.calls
    assert (first["input_tokens"], first["cache_read_tokens"]) == (900, 850)
    assert "cache_read_tokens" not in second and second["input_tokens"] == 90


async def test_prompts_level_keeps_the_prompt_and_off_keeps_nothing() -> None:
    """``prompts`` adds the prompt sent; ``off`` records no call and stores no recording."""
    provider = RecordingProvider(MockProvider([{"a": 1}, {"a": 2}]))
    with taping("prompts") as full:
        await provider.generate(_request("x"))
    assert full.calls[0]["prompt"]["system"] == "s"
    with taping("off") as off:
        await provider.generate(_request("y"))
    assert off.calls == [] and off.to_json() is None


async def test_a_failed_call_is_recorded_and_still_raised() -> None:
    """A provider failure is kept with its kind and reaches the engine unchanged."""
    provider = RecordingProvider(MockProvider([ProviderError("busy", kind="retryable")]))
    with taping() as tape, pytest.raises(ProviderError):
        await provider.generate(_request("x"))
    assert tape.calls[0]["ok"] is False and tape.calls[0]["error_kind"] == "retryable"


async def test_calls_outside_a_tape_are_not_recorded() -> None:
    """Without an open tape the wrapper is a plain pass-through."""
    inner = MockProvider([{"a": 1}])
    response = await RecordingProvider(inner).generate(_request("x"))
    assert response.json == {"a": 1} and len(inner.calls) == 1


async def test_concurrent_turns_each_record_only_their_own_calls_and_clock() -> None:
    """Many conversations on the same flows at once: every tape holds its own turn's calls,
    its own clock reading and nothing of another conversation."""

    def answer(request: ModelRequest) -> dict[str, Any]:
        if request.schema_name == "speak":
            return {"message": "Which size?", "size": None}
        text = request.meta.get("message", "")
        return {"flows": {"order": 95 if "order" in text else 0}, "fields": {"size": None}}

    clock = FakeClock("2026-02-01T08:00:00Z")
    agent = recorded_agent(_agent(MockProvider([answer] * 80), clock))

    async def one(n: int) -> tuple[int, Any, Any]:
        await asyncio.sleep(0.001 * (n % 3))
        with taping() as tape:
            result = await agent.turn({"session_id": f"s-{n}", "message": f"order {n}",
                                       "id": f"m{n}"})
        return n, tape, result

    outcomes = await asyncio.gather(*(one(n) for n in range(40)))
    for n, tape, result in outcomes:
        assert [c["kind"] for c in tape.calls] == ["understand", "speak"]
        assert tape.at == clock.now()
        assert result.session.id == f"s-{n}"
        assert result.llm_calls == len(tape.calls)
        assert [m.text for m in result.messages] == ["Which size?"]
        assert tape.calls[1]["reply"]["json"]["message"] == "Which size?"


def test_recorded_agent_keeps_the_original_agent_unchanged() -> None:
    """Wrapping gives a new agent; the one passed in keeps its own provider and clock."""
    provider, clock = MockProvider([]), FakeClock()
    agent = _agent(provider, clock)
    wrapped = recorded_agent(agent)
    assert agent.config.provider is provider and agent.config.clock is clock
    assert isinstance(wrapped.config.provider, RecordingProvider)
    assert recorded_agent(wrapped).config.provider is wrapped.config.provider


def test_fields_written_names_set_changed_and_removed_fields() -> None:
    """Only what the turn changed: new and changed values, removed fields as None."""
    before = {"data": {"a": 1, "b": 2, "c": 3}}
    after = {"data": {"a": 1, "b": 5, "d": 4}}
    assert fields_written(before, after) == {"b": 5, "d": 4, "c": None}
    assert fields_written(None, after) == {"a": 1, "b": 5, "d": 4}


async def test_a_digest_from_the_hosts_dump_is_the_digest_of_the_session_left() -> None:
    """A host that dumped the turn's result already hands ``to_json`` the session's JSON form
    from it: the stored digest is the one the session itself gives, over turns that start a
    flow, collect a field, finish it and answer another, for several conversations."""
    from engine.providers.rules import RuleProvider

    agent = recorded_agent(_agent(RuleProvider()))
    compared = 0
    for n in range(6):
        session: Any = None
        for text in ("I want to order", "size M please", "hours?", "buy one more", "L"):
            request: dict[str, Any] = {"session_id": f"s-{n}", "message": text, "id": text}
            if session is not None:
                request["session"] = session
            with taping("envelopes") as tape:
                result = await agent.turn(request)
            dumped = result.model_dump(mode="json")
            own, given = tape.to_json(), tape.to_json(dumped["session"])
            assert own is not None and given is not None and own["state"] == given["state"]
            # What is given is what is digested: another session's form, another digest.
            other = tape.to_json({**dumped["session"], "id": "another"})
            assert other is not None and other["state"] != own["state"]
            session = dumped["session"]
            compared += 1
    assert compared == 30


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text()
    | st.datetimes(timezones=st.just(UTC)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                               max_size=4),
    max_leaves=12,
)


@given(st.dictionaries(st.sampled_from(["version", "id", "data", "runs", "inputs", "é", "b"]),
                       _JSONISH, max_size=6))
def test_the_digest_is_of_the_text_json_dumps_writes(session: dict[str, Any]) -> None:
    """The digests already stored were taken over ``json.dumps`` with sorted keys (floats as
    ``repr`` writes them, NaN, non-ASCII and lone surrogates as they are, other values through
    ``str``), without the ``version``: any state gives that same digest."""
    body = {k: v for k, v in session.items() if k != "version"}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
                      default=str)
    expected = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    assert state_digest(session) == expected
    assert "version" in session or state_digest({**session, "version": 7}) == expected


def test_a_tape_block_puts_back_the_tape_around_it_when_it_ends_or_raises() -> None:
    """Nested blocks: the inner tape is current inside, the outer one again after it, none
    after both, also when the inner block raises."""
    from engine.recording import _CURRENT

    with taping("envelopes") as outer:
        assert _CURRENT.get() is outer
        with pytest.raises(KeyError), taping("prompts") as inner:
            assert _CURRENT.get() is inner and inner is not outer and inner.level == "prompts"
            raise KeyError("inside")
        assert _CURRENT.get() is outer
    assert _CURRENT.get() is None
