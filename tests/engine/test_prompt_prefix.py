"""Prompts laid out for prefix caches: what is fixed for an agent goes first and repeats byte for
byte in every conversation, the history follows, this turn's sections come last."""

from __future__ import annotations

import asyncio
import json
import re
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from engine import Agent, FakeClock, ModelRequest, ModelResponse
from engine.prompt import FLOWS_HEADING, topic_catalogue
from engine.providers.anthropic import messages_body
from engine.providers.base import ChatMessage, ToolCall, laid_out
from engine.providers.openai import chat_completion_body
from engine.providers.rules import RuleProvider
from examples.demo_agent import build_agent
from tests.examples.host import converse

_CONVERSATION: ContextVar[str] = ContextVar("conversation")

SCRIPTS = {
    f"c{i}": [
        "hi", f"my name is {name}", f"I need the {service} fixed on {day}", "yes",
        "what are your opening hours?", "thanks",
    ]
    for i, (name, service, day) in enumerate([
        ("Sam", "brakes", "saturday"), ("Ada", "flat tire", "monday"),
        ("Lin", "tune-up", "friday"), ("Bo", "brakes", "tuesday"),
        ("Eve", "flat tire", "wednesday"), ("Kai", "tune-up", "thursday"),
    ])
}


class Capturing:
    """The offline rule provider, keeping each request under the conversation that made it."""

    def __init__(self) -> None:
        self.inner = RuleProvider()
        self.requests: dict[str, list[ModelRequest]] = {}

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.requests.setdefault(_CONVERSATION.get(), []).append(request)
        await asyncio.sleep(0)  # let the other conversations interleave
        return await self.inner.generate(request)


async def _converse(agent: Any, session_id: str, texts: list[str]) -> None:
    _CONVERSATION.set(session_id)
    await converse(agent, session_id, texts)


def _run_conversations() -> dict[str, list[ModelRequest]]:
    provider = Capturing()
    agent = build_agent(provider=provider, clock=FakeClock(datetime(2026, 1, 5, 9, tzinfo=UTC)))

    async def all_at_once() -> None:
        await asyncio.gather(*(_converse(agent, sid, t) for sid, t in SCRIPTS.items()))

    asyncio.run(all_at_once())
    return provider.requests


def _openai(request: ModelRequest) -> dict[str, Any]:
    """The chat-completions body with llama.cpp's prompt cache asked for (the laid-out order)."""
    return chat_completion_body(request, model="m", prompt_cache="llama.cpp")


def _anthropic(request: ModelRequest) -> dict[str, Any]:
    """The Messages API body with the prompt cache asked for."""
    return messages_body(request, model="m", max_tokens=9, prompt_cache=True)


def _turn_entry(request: ModelRequest) -> str:
    """This call's turn sections as the serialized system entry the provider sends."""
    turn = request.system[request.turn_sections_at or 0:].strip()
    return json.dumps({"role": "system", "content": turn})


def _cached_part(request: ModelRequest) -> str:
    """The serialized OpenAI messages up to where this call's turn sections start: what the
    next call of the conversation can find in a server's prefix cache."""
    text = json.dumps(_openai(request)["messages"])
    return text[: text.index(_turn_entry(request))]


def test_every_conversation_of_an_agent_sends_the_same_system_prompt() -> None:
    """Six conversations of the demo agent run at once: every understand call sends one
    system text and every speak call another, byte for byte, with either cache asked for or
    the layout set alone; the Messages API's system text starts with it."""
    runs = _run_conversations()
    assert set(runs) == set(SCRIPTS)
    for kind in ("understand", "speak"):
        calls = [r for requests in runs.values() for r in requests if r.schema_name == kind]
        assert len(calls) >= len(SCRIPTS)
        heads = {json.dumps(_openai(r)["messages"][0]) for r in calls}
        cached = {json.dumps(chat_completion_body(r, model="m", prompt_cache=cache,
                                                  layout=layout)["messages"][0])
                  for r in calls
                  for cache, layout in (("key", None), ("off", "cache"))}
        assert len(heads) == 1 and cached == heads
        # The fixed head carries the agent and none of a turn's own sections.
        head = json.loads(next(iter(heads)))["content"]
        assert "Spoke & Chain" in head or "Ana" in head
        assert "## Customer message" not in head and "## Response format" not in head
        for r in calls:
            system = _anthropic(r)["system"]
            text = system if isinstance(system, str) else system[0]["text"]
            assert text.startswith(head)


def test_each_call_starts_with_everything_the_previous_one_sent_before_its_turn() -> None:
    """Within each conversation (six at once), each call of a kind starts with the previous
    call's system prompt and history byte for byte, and that shared start grows turn by turn;
    the customer's words are the last entry, after this turn's sections; no conversation's
    history appears in another's prompts."""
    runs = _run_conversations()
    for session_id, requests in runs.items():
        others = [f"my name is {t[1].split()[-1]}" for s, t in SCRIPTS.items() if s != session_id]
        for kind in ("understand", "speak"):
            calls = [r for r in requests if r.schema_name == kind]
            shared = [_cached_part(r) for r in calls]
            for earlier, later, later_call in zip(shared, shared[1:], calls[1:], strict=False):
                sent = json.dumps(_openai(later_call)["messages"])
                assert sent.startswith(earlier)
                assert len(later) >= len(earlier)
            assert len(shared[-1]) > len(shared[0])
            for r in calls:
                sent_messages = _openai(r)["messages"]
                turn_at = [json.dumps(m) for m in sent_messages].index(_turn_entry(r))
                after = sent_messages[turn_at + 1:]
                assert after and after[-1]["role"] == "user"
                if r.meta.get("message"):
                    assert after[-1]["content"].endswith(r.meta["messages"][-1])
            everything = " ".join(json.dumps(_openai(r)) for r in calls)
            assert not any(other in everything for other in others)


def test_turn_sections_go_after_the_history_before_the_unanswered_words_and_tool_rounds(
) -> None:
    """``laid_out`` sends the fixed part as the system prompt, then the history, then this
    turn's sections as a system entry right before the customer's words not yet answered,
    which stay the last user entry, ahead of the tool calls and results of this call."""
    call = ToolCall(id="t1", name="hours", arguments={})
    request = ModelRequest(
        schema_name="speak",
        system="## Identity\nYou are Ana.\n\n## Guideline\nBook it.",
        turn_sections_at=len("## Identity\nYou are Ana.") + 2,
        messages=[ChatMessage(role="user", text="hi"), ChatMessage(role="assistant", text="Hey"),
                  ChatMessage(role="user", text="hours?"),
                  ChatMessage(role="assistant", text="", tool_calls=[call]),
                  ChatMessage(role="tool", text="9-18", tool_call_id="t1")],
    )
    system, messages, turn, turn_at = laid_out(request)
    assert (system, turn, turn_at) == ("## Identity\nYou are Ana.", "## Guideline\nBook it.", 2)
    assert messages == request.messages
    body = _openai(request)
    assert [(m["role"], m["content"]) for m in body["messages"]] == [
        ("system", "## Identity\nYou are Ana."), ("user", "hi"), ("assistant", "Hey"),
        ("system", "## Guideline\nBook it."), ("user", "hours?"), ("assistant", ""),
        ("tool", "9-18")]


def test_a_turn_without_new_words_ends_on_a_user_placeholder_after_its_sections() -> None:
    """A turn with no customer message (a timer) whose history ends on the assistant sends the
    turn's sections after the whole history and a user placeholder last; a first turn sends
    its sections right after the fixed system prompt, before the customer's words."""
    request = ModelRequest(
        schema_name="speak", system="## Identity\nAna\n\n## Customer message\nnone",
        turn_sections_at=len("## Identity\nAna") + 2,
        messages=[ChatMessage(role="user", text="hi"), ChatMessage(role="assistant", text="Hey")])
    roles = [m["role"] for m in _openai(request)["messages"]]
    assert roles == ["system", "user", "assistant", "system", "user"]
    first = request.model_copy(update={"messages": [ChatMessage(role="user", text="hi")]})
    assert [(m["role"], m["content"]) for m in _openai(first)["messages"]] == [
        ("system", "## Identity\nAna"), ("system", "## Customer message\nnone"),
        ("user", "hi")]


def test_the_layout_follows_the_cache_unless_set() -> None:
    """Without a prompt cache asked for (the default) the request goes as the engine built it:
    one system entry with every section, then the messages; with one, laid out;
    ``layout`` (``TURNFLOW_MODEL_PROMPT_LAYOUT``) overrides either way."""
    request = ModelRequest(
        schema_name="speak", system="## Identity\nAna\n\n## Guideline\nGo.",
        turn_sections_at=len("## Identity\nAna") + 2,
        messages=[ChatMessage(role="user", text="hi")])
    built = [{"role": "system", "content": request.system}, {"role": "user", "content": "hi"}]
    laid = [{"role": "system", "content": "## Identity\nAna"},
            {"role": "system", "content": "## Guideline\nGo."},
            {"role": "user", "content": "hi"}]

    def sent(**options: Any) -> Any:
        return chat_completion_body(request, model="m", **options)["messages"]

    assert sent() == built and sent(prompt_cache="off") == built
    assert sent(prompt_cache="llama.cpp") == laid and sent(prompt_cache="key") == laid
    assert sent(prompt_cache="llama.cpp", layout="built") == built
    assert sent(layout="cache") == laid


def test_without_a_split_the_request_is_sent_as_it_is() -> None:
    """A request without ``turn_sections_at`` (or with one outside its system text) keeps its
    whole system text as the system prompt and its messages unchanged."""
    messages = [ChatMessage(role="user", text="hi")]
    plain = ModelRequest(schema_name="compact", system="Summarize.", messages=messages)
    outside = plain.model_copy(update={"turn_sections_at": 99})
    assert laid_out(plain) == ("Summarize.", messages, "", 1)
    assert laid_out(outside) == ("Summarize.", messages, "", 1)
    assert _openai(plain)["messages"] == [{"role": "system", "content": "Summarize."},
                                          {"role": "user", "content": "hi"}]


def _understand_calls(runs: dict[str, list[ModelRequest]]) -> list[ModelRequest]:
    return [r for requests in runs.values() for r in requests if r.schema_name == "understand"]


def test_the_flow_catalogue_is_part_of_every_understand_calls_fixed_prefix() -> None:
    """Six conversations at once: every understand call that scores flows sends one fixed part,
    byte for byte, holding the task and every message-triggered flow's description and
    phrases in config order; its turn section only names the flows to score (a flow without
    phrases, like the welcome floor, keeps its description there); no conversation's words
    are in the fixed part."""
    runs = _run_conversations()
    calls = [r for r in _understand_calls(runs) if r.meta["flows"]]
    assert len(calls) >= 2 * len(SCRIPTS)
    fixed = {r.system[: r.turn_sections_at] for r in calls}
    assert len(fixed) == 1
    head = next(iter(fixed))
    catalogue = topic_catalogue(build_agent(provider=RuleProvider()).config)
    assert list(catalogue) == ["booking", "one_at_a_time", "hours"]
    assert head.endswith("\n".join(catalogue.values()) + "\n\n")
    assert "The customer wants a repair or service booked." in head
    assert "when are you open" in head
    assert json.dumps(_openai(calls[0])["messages"][0]) == json.dumps(
        {"role": "system", "content": head.rstrip()})
    own_words = [t[1].split()[-1] for t in SCRIPTS.values()] + [
        t[2].split()[-1] for t in SCRIPTS.values()]
    assert not any(re.search(rf"\b{word}\b", head) for word in own_words)
    for r in calls:
        turn = r.system[r.turn_sections_at or 0:]
        scored = turn.split("\n\n")[0].splitlines()
        assert scored[0] == f"## {FLOWS_HEADING}"
        for line, flow_id in zip(scored[1:], r.meta["flows"], strict=True):
            waits = r.meta.get("asking", {}).get(flow_id)
            asking = f" — waiting for the customer's answer on: {waits}" if waits else ""
            if flow_id in catalogue:
                assert line == catalogue[flow_id].split(" — ")[0].split(" (e.g.")[0] + asking
            else:
                assert line.startswith(f"- {flow_id}: ") and " — " in line
                assert line.endswith(asking)
    assert any("- welcome: Welcome — " in r.system[r.turn_sections_at or 0:] for r in calls)
    # The asking booking, scored beside the hours: its line says what it waits for.
    assert any(r.meta.get("asking", {}).get("booking") for r in calls)


def test_an_asking_flow_scored_beside_others_says_what_it_waits_for() -> None:
    """A bare answer ("wednesday") after another flow's reply is the asking flow's: its line in
    the understand prompt names the question still open, in every conversation, and only that
    flow's; with nobody asking, no line says it."""
    provider = Capturing()
    agent = build_agent(provider=provider, clock=FakeClock(datetime(2026, 1, 5, 9, tzinfo=UTC)))
    scripts = {f"a{i}": ["hi, I'm Lee", f"I need the {service} fixed", "what are your hours?",
                         day] for i, (service, day) in enumerate(
                             [("brakes", "wednesday"), ("flat tire", "friday"),
                              ("tune-up", "monday")])}

    async def all_at_once() -> None:
        await asyncio.gather(*(_converse(agent, sid, t) for sid, t in scripts.items()))

    asyncio.run(all_at_once())
    for sid, texts in scripts.items():
        calls = [r for r in provider.requests[sid]
                 if r.schema_name == "understand" and r.meta["flows"]]
        last = calls[-1]
        assert last.meta["message"] == texts[-1]
        assert last.meta["asking"] == {
            "booking": "day (Which day suits you, Monday to Saturday?)"}, sid
        turn = last.system[last.turn_sections_at or 0:]
        assert ("- booking: Book a repair — waiting for the customer's answer on: "
                "day (Which day suits you, Monday to Saturday?)") in turn.splitlines()
        assert not any("waiting for" in line for line in turn.splitlines()
                       if not line.startswith("- booking:"))
        # Every other conversation's open question never shows here.
        assert all(t[-1] not in turn for other, t in scripts.items() if other != sid)
    first = next(r for r in provider.requests["a0"] if r.schema_name == "understand")
    assert "asking" not in first.meta
    assert "waiting for" not in first.system


def test_understand_without_flows_to_score_splits_after_the_task() -> None:
    """The split rule: the catalogue joins the fixed part only on calls that score flows; a call
    that scores none (only fields or branches to read) keeps the task alone as its fixed part,
    with no catalogue in its text at all; a flow whose trigger has no phrases is not in it."""
    provider = Capturing()
    agent = Agent(
        name="Ana", provider=provider, clock=FakeClock(datetime(2026, 1, 5, 9, tzinfo=UTC)),
        fields={"name": {"type": "string", "ask": "Their first name."}},
        flows=[
            {"id": "greet", "on": [{"message": []}],
             "steps": [{"id": "ask", "collect": ["name"], "question": "What's your name?"},
                       {"id": "done", "say": "Thanks {{name}}."}]},
            {"id": "hours", "description": "Opening hours",
             "on": [{"message": ["hours"], "if": {"known": "name"}}],
             "steps": [{"id": "h", "say": "9-18."}]},
            {"id": "prices", "on": [{"message": ["prices"], "if": {"known": "name"}}],
             "steps": [{"id": "p", "say": "From 20."}]},
        ],
    )

    asyncio.run(_converse(agent, "solo", ["hello", "my name is Sam", "what are your hours?"]))
    calls = _understand_calls(provider.requests)
    assert calls
    task_only = [r for r in calls if not r.meta["flows"]]
    assert task_only, [r.meta for r in calls]
    for r in task_only:
        head = r.system[: r.turn_sections_at]
        assert head.startswith("## Task\n") and head.count("## ") == 1
        assert "## Topics" not in r.system
    assert any(r.meta["flows"] for r in calls), [r.meta for r in calls]
    for r in calls:
        if r.meta["flows"]:
            assert r.system[: r.turn_sections_at].rstrip().endswith(
                "- hours: hours — Opening hours (e.g. hours)\n- prices: prices (e.g. prices)")
