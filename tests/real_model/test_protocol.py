"""The providers' protocol against a real llama.cpp server: every call kind the engine makes
comes back parsed against its schema with its token usage, tool rounds are sent in a shape the
server takes, and a reply cut off or a request shape refused is handled as specified. What the
tiny model says is never checked, only the shape of what goes and comes back, and that what
the customer gets is never a broken reply. What the customer gets from a whole chat is judged
in test_demo_chat.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import jsonschema
import pytest

from engine import Agent, FakeClock, ProviderError
from engine.envelopes import speak_schema
from engine.providers.base import ChatMessage, ModelRequest, ToolCall, ToolSpec
from examples.demo_agent import build_agent
from tests.examples.host import Conversation
from tests.fixtures.llama_server import LlamaServer
from tests.real_model.conftest import REPLY_CAP, Call, Recorder, recording

pytestmark = [pytest.mark.real_model, pytest.mark.timeout(900)]

START = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)  # a Monday, inside the demo's opening hours
LOOKUP = ToolSpec(name="lookup", description="Find an order by its id.",
                  parameters={"type": "object", "properties": {"id": {"type": "string"}},
                              "required": ["id"]})


def assert_fits(call: Call) -> None:
    """A successful call: its JSON fits the schema it was asked for, and usage was read."""
    assert call.response is not None, call.error
    assert call.response.json is not None
    jsonschema.validate(call.response.json, call.request.json_schema)
    usage = call.response.usage
    assert usage is not None and (usage.input_tokens or 0) > 0 and (usage.output_tokens or 0) > 0


def assert_failed_unusable(call: Call) -> None:
    """A failed call failed only as an unusable reply (cut off or not JSON), retryable."""
    assert call.error is not None
    assert call.error.kind == "retryable" and "unusable reply" in str(call.error), call.error


def sent_texts(results: list[Any]) -> list[str]:
    return [message.text for result in results for message in result.messages]


def assert_no_broken_json_sent(results: list[Any]) -> None:
    """No reply that failed to parse reached the customer as text."""
    for text in sent_texts(results):
        assert not text.lstrip().startswith(("{", "[", "```")), text


def one_talk_agent(provider: Recorder, **options: Any) -> Agent:
    """A catch-all flow with one talk step: a message costs exactly one speak call."""
    return Agent(name="Ana", persona="Front desk of a bike shop.", provider=provider,
                 flows=[{"id": "chat", "on": [{"message": []}],
                         "steps": [{"id": "talk", "prompt": "Greet the customer briefly."}]}],
                 **options)


async def test_understand_and_speak_replies_fit_their_schemas(recorder: Recorder) -> None:
    """A demo turn through the engine: the understand reply parses against its schema with
    usage read; each speak reply that came back does too, and one the tiny model ran past the
    token cap with (SmolLM2 repeats itself) failed as an unusable reply and deferred its step
    to the retry ladder. The customer is answered all the same (the welcome's lines need no
    model) and never sees a broken reply. The speak schema's own round trip is checked by
    the structured-output test below, whose short reply always fits."""
    await _a_demo_turn_fits(recorder)


async def test_the_laid_out_prompt_gets_the_same_kind_of_turn(llama_server: LlamaServer) -> None:
    """The same demo turn with llama.cpp's prompt cache and slots asked for, so the prompt is
    laid out for the cache (this turn's sections as a system entry before the customer's
    words): the model still reads the booking message as one that needs a reply, and every
    reply fits or fails as an unusable reply."""
    async for recorder in recording(llama_server, prompt_cache="llama.cpp", slots=2):
        await _a_demo_turn_fits(recorder)
        for body in recorder.bodies:  # the fixed sections, this turn's, the customer's words
            assert [m["role"] for m in body["messages"]] == ["system", "system", "user"]


async def _a_demo_turn_fits(recorder: Recorder) -> None:
    clock = FakeClock(START)
    chat = Conversation(build_agent(recorder, clock), clock)
    results = [await chat.say("I want to book a repair for my brakes on saturday")]
    understood = recorder.of("understand")
    assert any(c.response is not None for c in understood), [c.error for c in understood]
    for call in recorder.calls:
        assert_fits(call) if call.error is None else assert_failed_unusable(call)
    spoken = recorder.of("speak")
    assert spoken
    if all(call.error is not None for call in spoken):
        assert "deferred" in [outcome.code for outcome in results[0].outcomes]
    assert results[0].messages, results[0].outcomes
    assert_no_broken_json_sent(results)
    for body in recorder.bodies:
        assert body["max_tokens"] == REPLY_CAP and body["response_format"]["type"] == "json_schema"
        assert body["messages"][-1]["role"] in ("user", "tool")


@pytest.mark.parametrize("mode", ["json_schema", "json_object_schema", "json_object"])
async def test_every_structured_output_mode_is_accepted(llama_server: LlamaServer,
                                                        mode: str) -> None:
    """Each json mode is a request the server takes; the schema modes return a fitting reply,
    json_object at least a JSON object."""
    request = ModelRequest(
        schema_name="speak", system='You are Ana. Answer with JSON {"message": "..."}.',
        messages=[ChatMessage(role="user", text="hello")], json_schema=speak_schema({}))
    async for recorder in recording(llama_server, json_mode=mode):
        try:
            await recorder.generate(request)
        except ProviderError:
            pass
        (call,) = recorder.calls
        if mode == "json_object":
            assert call.error is None and isinstance(call.response and call.response.json, dict)
        else:
            assert_fits(call)
        format_sent = recorder.bodies[0]["response_format"]
        assert format_sent["type"] == ("json_schema" if mode == "json_schema" else "json_object")
        assert ("schema" in format_sent) == (mode == "json_object_schema")


HISTORIES = [
    [("user", "Hi, I am Sam and my bike has a flat tire."),
     ("assistant", "Hello Sam! We can fix a flat tire. Which day suits you?"),
     ("user", "Saturday morning, please, if that works for you."),
     ("assistant", "Saturday morning works. Anything else we can do?")],
    [("user", "My brakes squeak whenever I ride downhill."),
     ("assistant", "We can check the brakes for you. Which day would suit you?"),
     ("user", "Monday after work would be the best day for me."),
     ("assistant", "Monday after work it is. See you then at the shop.")],
    [("user", "Do you also fix electric bikes at your shop?"),
     ("assistant", "Yes, we repair electric bikes as well as regular ones."),
     ("user", "Great, then I would like a full tune-up for mine."),
     ("assistant", "A full tune-up for your electric bike, noted for you.")],
]


async def test_compaction_call_fits_its_schema(recorder: Recorder) -> None:
    """A history past the compaction bound makes one compact call before the speak call. A
    summary that comes back fits its schema with usage read; one the model runs past the cap
    with fails as an unusable reply and the turn goes on without it. The tiny model does not
    always stop, so up to three conversations are tried and one summary must come back."""
    for turns in HISTORIES:
        recorder.calls.clear()
        agent = one_talk_agent(recorder, compaction={"keep_last": 2, "max_chars": 60})
        history = [{"role": role, "text": text} for role, text in turns]
        result = await Conversation(agent, FakeClock(START), history=history).say("thanks")
        compact = recorder.calls[0]
        assert compact.request.schema_name == "compact"
        assert [c.request.schema_name for c in recorder.calls[1:]] == ["speak"]
        assert_no_broken_json_sent([result])
        if compact.error is None:
            assert_fits(compact)
            return
        assert_failed_unusable(compact)
        assert "compaction-failed" in [outcome.code for outcome in result.outcomes]
    pytest.fail("no summary came back within the token cap in three conversations")


async def test_speak_with_tools_offers_them_and_replays_a_tool_round(recorder: Recorder) -> None:
    """With tools the request says tool_choice auto and the reply parses (the envelope or a
    call of an offered tool); a replayed tool round (an assistant call with empty content, then
    its result) is a message list the server takes."""
    schema = speak_schema({})
    offer = ModelRequest(schema_name="speak", system="You are Ana. Use lookup for orders.",
                         messages=[ChatMessage(role="user", text="where is order 7?")],
                         json_schema=schema, tools=[LOOKUP])
    replay = offer.model_copy(update={"messages": [
        *offer.messages,
        ChatMessage(role="assistant", tool_calls=[ToolCall(id="t1", name="lookup",
                                                           arguments={"id": "7"})]),
        ChatMessage(role="tool", tool_call_id="t1", text='{"status": "shipped"}'),
    ]})
    for request in (offer, replay):
        await recorder.generate(request)
    for call in recorder.calls:
        assert call.response is not None, call.error
        if call.response.tool_calls:
            assert {t.name for t in call.response.tool_calls} <= {"lookup"}
        else:
            assert_fits(call)
    first, second = recorder.bodies
    assert first["tool_choice"] == "auto" and first["tools"][0]["function"]["name"] == "lookup"
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    assert second["messages"][2]["content"] == ""


async def test_a_truncated_reply_never_reaches_the_customer(llama_server: LlamaServer) -> None:
    """With a tiny max_tokens the server stops mid-reply: the speak call fails as an unusable
    reply, the step is deferred to the retry ladder, and nothing is sent."""
    async for recorder in recording(llama_server, max_tokens=4):
        clock = FakeClock(START)
        result = await Conversation(one_talk_agent(recorder), clock).say("hello there")
        (call,) = recorder.calls
        assert call.error is not None and "token limit" in str(call.error)
        assert call.error.kind == "retryable" and "max_tokens 4" in str(call.error)
        assert result.messages == []
        assert "deferred" in [outcome.code for outcome in result.outcomes]


async def test_a_refused_request_shape_fails_once_as_fatal(recorder: Recorder) -> None:
    """A request the server refuses as malformed (a schema it cannot compile) fails at the
    first call as fatal, with the server's own explanation, and is made only once."""
    request = ModelRequest(schema_name="speak", system="s",
                           messages=[ChatMessage(role="user", text="hi")],
                           json_schema={"type": "bogus"})
    with pytest.raises(ProviderError) as caught:
        await recorder.generate(request)
    assert caught.value.kind == "fatal" and caught.value.status == 400
    assert "bogus" in str(caught.value)
    assert len(recorder.bodies) == 1


async def test_each_call_kind_keeps_its_slot_and_reads_its_prefix_from_the_cache(
    llama_server: LlamaServer,
) -> None:
    """With ``cache_prompt`` and two slots, a conversation's understand calls go to slot 0 and
    its speak calls to slot 1, a server takes both, and a later turn's calls read the earlier
    prompt's start from their slot's cache, reported as cached prompt tokens."""
    async for recorder in recording(llama_server, prompt_cache="llama.cpp", slots=2):
        clock = FakeClock(START)
        chat = Conversation(build_agent(recorder, clock), clock, session_id="s-slots")
        for text in ("hi, my name is Sam", "I want my brakes fixed on saturday"):
            try:
                await chat.say(text)
            except ProviderError as exc:  # an understand reply cut off: the host retries
                assert exc.kind == "retryable" and "unusable reply" in str(exc)
        slots = {call.request.schema_name: set() for call in recorder.calls}
        for call, body in zip(recorder.calls, recorder.bodies, strict=True):
            assert body["cache_prompt"] is True
            slots[call.request.schema_name].add(body.get("id_slot"))
        assert slots["understand"] == {0} and slots.get("speak", {1}) == {1}
        later = [c for c in recorder.of("understand")[1:] if c.response is not None]
        assert later, [c.error for c in recorder.of("understand")]
        usage = later[0].response.usage if later[0].response else None
        assert usage is not None and (usage.cache_read_tokens or 0) > 0, usage
