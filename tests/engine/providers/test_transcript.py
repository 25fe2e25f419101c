"""The append-only layout (``layout="append"``): each call of a conversation sends the previous
call's prompt and reply, then what is new; replies are asked for short."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from typing import Any

import httpx

from engine import FakeClock, ModelRequest
from engine.envelopes import UnderstandPlan, speak_schema, understand_schema
from engine.providers import OpenAIProvider
from engine.providers.base import ChatMessage
from engine.providers.openai import append_messages, chat_completion_body
from engine.providers.rules import RuleProvider
from engine.providers.settings import provider_from_env
from engine.providers.slots import slot_for
from engine.providers.transcript import (
    PLAIN_REPLY,
    SHORT_UNDERSTAND,
    Transcripts,
    optional_schema,
)
from examples.demo_agent import build_agent
from tests.examples.host import Conversation

TURNS = ["hi there", "my name is Sam", "I'd like to book a repair for my brakes",
         "saturday please", "yes, that's right", "what are your opening hours?", "thanks, bye"]


class RulesOverHttp:
    """The offline rule provider answering an ``OpenAIProvider`` in the append-only layout
    through a mock transport; keeps every body sent."""

    def __init__(self) -> None:
        self.rules = RuleProvider()
        self.current: ModelRequest | None = None
        self.bodies: list[dict[str, Any]] = []
        self.provider = OpenAIProvider(
            "k", layout="append", prompt_cache="llama.cpp", slots=2,
            transport=httpx.MockTransport(self._answer),
        )

    async def _answer(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        assert self.current is not None
        reply = await self.rules.generate(self.current)
        text = reply.text if body.get("response_format") is None else json.dumps(reply.json)
        if body.get("response_format") is None and reply.json is not None:
            text = reply.json.get("message") or ""
        return httpx.Response(200, json={"choices": [
            {"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]})

    async def generate(self, request: ModelRequest) -> Any:
        self.current = request
        return await self.provider.generate(request)


async def _talk(turns: list[str]) -> RulesOverHttp:
    server = RulesOverHttp()
    clock = FakeClock(datetime(2026, 3, 2, 10, tzinfo=UTC))
    chat = Conversation(build_agent(server, clock), clock, session_id="s1")
    for text in turns:
        await chat.say(text)
    return server


async def test_every_call_sends_the_previous_prompt_and_reply_then_what_is_new() -> None:
    server = await _talk(TURNS)
    bodies = server.bodies
    assert len(bodies) >= 10
    for before, after in itertools.pairwise(bodies):
        sent, now = before["messages"], after["messages"]
        # Everything the previous call sent comes back as it was; its last entry (an
        # understand reply, kept, may take what code said after it into the same entry).
        assert now[: len(sent) - 1] == sent[:-1]
        assert now[len(sent) - 1]["content"].startswith(sent[-1]["content"])
        assert now[-1]["role"] == "system"  # this call's own sections come last
    transcripts = server.provider.transcripts
    assert transcripts.restarts == 1 and transcripts.appended == len(bodies) - 1
    # One system prompt for both call kinds, the same on every call.
    assert len({b["messages"][0]["content"] for b in bodies}) == 1
    # Both kinds of the conversation in one slot.
    assert len({b["id_slot"] for b in bodies}) == 1


async def test_understand_reply_follows_its_sections_and_speak_shares_them() -> None:
    server = await _talk(TURNS[:2])
    understand, speak = server.bodies[-2:]
    assert SHORT_UNDERSTAND in understand["messages"][-1]["content"]
    assert speak["messages"][: len(understand["messages"])] == understand["messages"]
    kept_reply = speak["messages"][len(understand["messages"])]
    assert kept_reply["role"] == "assistant" and kept_reply["content"].startswith("{")


async def test_a_history_that_does_not_extend_the_kept_one_starts_a_new_prefix() -> None:
    transcripts = Transcripts()
    from engine.providers.openai import _add_entries

    def request(texts: list[str]) -> ModelRequest:
        return ModelRequest(
            schema_name="speak", system="## Identity\nAna\n\n## Guideline\ngo on",
            turn_sections_at=len("## Identity\nAna") + 2, conversation="c",
            messages=[ChatMessage(role="user" if i % 2 == 0 else "assistant", text=t)
                      for i, t in enumerate(texts)],
        )

    first = request(["a", "b", "c"])
    _, entries, kept = transcripts.layout(first, _add_entries)
    assert kept is not None
    transcripts.keep("c", kept, "", understand=False)
    _, entries, _ = transcripts.layout(request(["a", "b", "c", "d", "e"]), _add_entries)
    assert [e["content"] for e in entries] == ["a", "b", "c", "## Guideline\ngo on", "d", "e",
                                               "## Guideline\ngo on"]
    # A compaction (or a window that moved on) changes the start: a new prefix.
    _, entries, _ = transcripts.layout(request(["summary", "d", "e"]), _add_entries)
    assert [e["content"] for e in entries] == ["summary", "d", "e", "## Guideline\ngo on"]
    assert (transcripts.restarts, transcripts.appended) == (2, 1)


def test_short_replies_where_the_provider_allows() -> None:
    plan = UnderstandPlan(flows={"booking": ["book"]})
    understand = ModelRequest(schema_name="understand", system="## Task\nt\n\n## flows\nx",
                              turn_sections_at=len("## Task\nt") + 2,
                              json_schema=understand_schema(plan), conversation="c")
    body = chat_completion_body(understand, model="m", layout="append")
    sent = body["response_format"]["json_schema"]
    assert sent["strict"] is False
    assert "required" not in json.dumps(sent["schema"])
    assert sent["schema"]["properties"]["flows"]["additionalProperties"] is False
    speak = ModelRequest(schema_name="speak", system="## Identity\nA\n\n## Response format\n"
                         'Answer with one JSON object: "message" is your reply to the customer.',
                         turn_sections_at=len("## Identity\nA") + 2,
                         json_schema=speak_schema({}), conversation="c")
    body = chat_completion_body(speak, model="m", layout="append")
    assert "response_format" not in body
    assert body["messages"][-1]["content"].endswith(PLAIN_REPLY)
    # The other layouts send the schema as it is.
    assert chat_completion_body(speak, model="m", layout="cache")["response_format"]


def test_optional_schema_keeps_what_the_schema_refuses() -> None:
    schema = {"type": "object", "required": ["a"], "additionalProperties": False,
              "properties": {"a": {"type": "object", "required": ["b"],
                                   "properties": {"b": {"enum": ["x", None]}}}}}
    relaxed = optional_schema(schema)
    assert relaxed == {"type": "object", "additionalProperties": False,
                       "properties": {"a": {"type": "object",
                                            "properties": {"b": {"enum": ["x", None]}}}}}


def test_both_kinds_share_a_slot_in_the_append_layout() -> None:
    for conversation in ("a", "b", "c", "d"):
        shared = {slot_for(k, conversation, 4, shared=True) for k in ("understand", "speak")}
        assert len(shared) == 1 and shared <= {0, 1, 2, 3}
    assert slot_for("compact", "a", 4, shared=True) is None


def test_the_layout_is_a_setting() -> None:
    provider = provider_from_env({"OPENAI_BASE_URL": "http://127.0.0.1:1/v1",
                                  "TURNFLOW_MODEL_PROMPT_LAYOUT": "append"})
    assert isinstance(provider, OpenAIProvider) and provider.layout == "append"


def test_without_a_conversation_a_call_is_laid_out_alone() -> None:
    request = ModelRequest(schema_name="speak", system="## Identity\nA\n\n## Guideline\ng",
                           turn_sections_at=len("## Identity\nA") + 2,
                           messages=[ChatMessage(role="user", text="hi")])
    transcripts = Transcripts()
    messages, kept = append_messages(request, transcripts)
    assert kept is None and [m["role"] for m in messages] == ["system", "user", "system"]


async def test_a_window_that_moves_starts_a_new_prefix_every_half_window() -> None:
    """A host that gives the last 20 entries: once the window is full, a new prefix starts at
    the customer message nearest its middle, and the next turns append to it again."""
    server = RulesOverHttp()
    clock = FakeClock(datetime(2026, 3, 2, 10, tzinfo=UTC))
    chat = Conversation(build_agent(server, clock), clock, session_id="s1")
    turns = ["hi there", "what are your opening hours?", "do you fix electric bikes?",
             "thanks"] * 8
    window = 20
    for text in turns:
        await chat.say(text)
        del chat.history[:-window]
    transcripts = server.provider.transcripts
    calls = len(server.bodies)
    assert 1 < transcripts.restarts < calls / 3
    assert transcripts.restarts + transcripts.appended == calls
    for body in server.bodies:
        said = [m for m in body["messages"][1:] if m["role"] == "user"]
        assert len(said) <= window  # never more of the conversation than the window holds


async def test_a_compaction_summary_is_never_left_out() -> None:
    transcripts = Transcripts()
    from engine.providers.openai import _add_entries

    def request(texts: list[str]) -> ModelRequest:
        return ModelRequest(
            schema_name="speak", system="## Identity\nAna\n\n## Guideline\ng",
            turn_sections_at=len("## Identity\nAna") + 2, conversation="c",
            messages=[ChatMessage(role="user" if i % 2 == 0 else "assistant", text=t)
                      for i, t in enumerate(texts)],
        )

    _, _, kept = transcripts.layout(request(["c", "d", "e"]), _add_entries)
    assert kept is not None
    transcripts.keep("c", kept, "", understand=False)
    summary = "[Summary of the earlier conversation] a, b"
    _, entries, _ = transcripts.layout(request([summary, "x", "c", "d", "e", "f", "g"]),
                                       _add_entries)
    assert entries[0]["content"] == summary and transcripts.restarts == 2
