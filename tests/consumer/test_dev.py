"""``turnflow dev`` pieces that need no server: chat lines, the per-turn footer, the observer."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator

import pytest

from consumer.devchat import dev
from consumer.devchat import terminal as terminal_chat
from consumer.devchat.dev import (
    Chat,
    ChatLine,
    ObservedAgent,
    ObservedTurn,
    format_outcomes,
    parse_chat_line,
    turn_wait_s,
)
from engine import ProviderError


def test_plain_line_is_a_message() -> None:
    """A line that does not start with a slash is sent as the customer's message, trimmed."""
    assert parse_chat_line("  I want to book a repair \n") == ChatLine(
        "message", text="I want to book a repair"
    )


def test_blank_and_comment_lines_are_skipped() -> None:
    """Blank lines and lines starting with # are not sent, so scripts can carry comments."""
    assert parse_chat_line("   ").kind == "skip"
    assert parse_chat_line("# a comment").kind == "skip"


def test_wait_reads_seconds() -> None:
    """``/wait 5`` waits five seconds; fractions are allowed."""
    assert parse_chat_line("/wait 5") == ChatLine("wait", seconds=5.0)
    assert parse_chat_line("/wait 0.5").seconds == 0.5


@pytest.mark.parametrize("line", ["/wait", "/wait soon", "/wait -1"])
def test_wait_without_a_valid_number_is_refused(line: str) -> None:
    """A ``/wait`` with no number, or a negative one, is a clear error, not a silent zero."""
    with pytest.raises(ValueError, match="/wait"):
        parse_chat_line(line)


def test_event_with_payload() -> None:
    """``/event NAME JSON`` sends that event with the JSON object as payload."""
    assert parse_chat_line('/event paid {"amount": 45}') == ChatLine(
        "event", event="paid", payload={"amount": 45}
    )
    assert parse_chat_line("/event paid") == ChatLine("event", event="paid", payload={})


@pytest.mark.parametrize(
    ("line", "message"),
    [("/event", "needs a name"), ("/event paid {oops", "not JSON"), ("/event paid [1]", "object")],
)
def test_bad_event_lines_are_refused(line: str, message: str) -> None:
    """An event with no name or a payload that is not a JSON object is refused with the reason."""
    with pytest.raises(ValueError, match=message):
        parse_chat_line(line)


def test_quit_and_unknown_commands() -> None:
    """``/quit`` ends the chat; an unknown command is refused and the help names the real ones."""
    assert parse_chat_line("/quit").kind == "quit"
    with pytest.raises(ValueError, match="/event NAME"):
        parse_chat_line("/dance")


def test_footer_lists_llm_calls_and_outcomes() -> None:
    """The per-turn footer shows ``llm_calls`` and each outcome as flow/step code (detail)."""
    result = {
        "llm_calls": 2,
        "outcomes": [
            {"flow_id": "booking", "step_id": "what", "code": None, "status": "asking"},
            {"flow_id": "booking", "step_id": "breath", "code": "inline-delay",
             "detail": "1500ms"},
        ],
    }
    assert format_outcomes(result) == (
        "llm_calls=2 | booking/what asking; booking/breath inline-delay (1500ms)"
    )


def test_footer_of_an_empty_turn() -> None:
    """A turn with no outcome still shows its model-call count."""
    assert format_outcomes({"llm_calls": 0}) == "llm_calls=0 | nothing to report"


class _Agent:
    name = "Ana"

    async def turn(self, request: dict[str, object]) -> dict[str, object]:
        return {"llm_calls": 1, "echo": request["message"]}


async def test_observed_agent_reports_each_turn_and_delegates() -> None:
    """The wrapper returns the real result, reports request and result, keeps attributes."""
    seen: list[ObservedTurn] = []
    observed = ObservedAgent(_Agent(), seen.append)
    result = await observed.turn({"session_id": "s1", "message": "hi"})
    assert result == {"llm_calls": 1, "echo": "hi"}
    assert seen == [ObservedTurn({"session_id": "s1", "message": "hi"}, result)]
    assert observed.name == "Ana"


async def test_a_failing_observer_never_fails_the_turn() -> None:
    """An exception in the chat's observer is swallowed: the consumer still gets the result."""

    def broken(_: ObservedTurn) -> None:
        raise RuntimeError("display died")

    result = await ObservedAgent(_Agent(), broken).turn({"session_id": "s1", "message": "x"})
    assert result["llm_calls"] == 1


class _Replies:
    """Stands in for ``ReplyReader``: records published so far, by key."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, object]] = {}

    async def wait_for(self, key: str, within: float) -> dict[str, object] | None:
        return self.records.get(key)


class _Pipe:
    """Stands in for the broker and the consumer: a produced input runs a scripted turn."""

    def __init__(self, replies: _Replies, results: list[dict[str, object]]) -> None:
        self.replies = replies
        self.results = results
        self.chat: Chat | None = None
        self.sent: list[dict[str, object]] = []

    async def send_and_wait(self, topic: str, *, key: bytes, value: bytes) -> None:
        request = json.loads(value)
        self.sent.append(request)
        result = self.results.pop(0)
        for message in result.get("messages", []):  # type: ignore[attr-defined]
            if message.get("published", True):
                self.replies.records[message["key"]] = {**message, "after_ms": 0}
        assert self.chat is not None
        self.chat.observe(ObservedTurn(request, result))


def _chat(results: list[dict[str, object]]) -> tuple[Chat, _Pipe, io.StringIO]:
    out = io.StringIO()
    replies = _Replies()
    pipe = _Pipe(replies, results)
    chat = Chat(session_id="s1", agent_name="ana", producer=pipe, inbound_topic="in",
                replies=replies, out=out, reply_timeout=0.2, echo=True)  # type: ignore[arg-type]
    pipe.chat = chat
    return chat, pipe, out


async def _script(*lines: str) -> AsyncIterator[str]:
    for line in lines:
        yield line


async def test_chat_prints_replies_then_the_footer() -> None:
    """A typed line goes out as a message input; its replies and footer are printed in order."""
    chat, pipe, out = _chat([{"llm_calls": 1, "messages": [{"key": "k1", "text": "Hello!"}],
                              "outcomes": [{"flow_id": "f", "step_id": "s", "code": "said"}]}])
    display = asyncio.create_task(chat.display())
    await chat.run(_script("hi", "/quit", "never sent"))
    display.cancel()
    assert out.getvalue().splitlines() == ["you> hi", "ana> Hello!", "  [llm_calls=1 | f/s said]"]
    assert [(r["session_id"], r["message"], r["id"]) for r in pipe.sent] == [("s1", "hi", "s1-m1")]
    assert chat.missing == 0


async def test_chat_sends_events_with_a_key() -> None:
    """``/event`` goes out as an event input with its payload and an idempotency key."""
    chat, pipe, out = _chat([{"llm_calls": 0, "messages": [], "outcomes": []}])
    display = asyncio.create_task(chat.display())
    await chat.run(_script('/event paid {"amount": 45}'))
    display.cancel()
    assert pipe.sent == [{"session_id": "s1", "event": "paid", "payload": {"amount": 45},
                          "key": "s1-e1"}]
    assert "  [event paid sent]" in out.getvalue()


async def test_chat_shows_turns_nobody_typed() -> None:
    """A wake turn the consumer ran on its own is printed as a timer firing, with its reply."""
    chat, _, out = _chat([])
    display = asyncio.create_task(chat.display())
    chat._replies.records["n1"] = {"key": "n1", "text": "Still there?", "after_ms": 0}
    chat.observe(ObservedTurn({"session_id": "s1", "wake": "silence:nudge:s1:1"},
                              {"llm_calls": 0, "messages": [{"key": "n1"}], "outcomes": []}))
    chat.observe(ObservedTurn({"session_id": "other", "wake": "x"}, {"llm_calls": 0}))
    await chat.settle()
    display.cancel()
    assert out.getvalue().splitlines()[:2] == [
        "  [timer fired: silence:nudge:s1:1]", "ana> Still there?"
    ]
    assert "other" not in out.getvalue()


async def test_a_reply_that_never_arrives_is_reported() -> None:
    """A reply the turn produced but the topic never delivered is named and counted."""
    chat, _, out = _chat([{"llm_calls": 1, "outcomes": [],
                           "messages": [{"key": "lost", "text": "x", "published": False}]}])
    display = asyncio.create_task(chat.display())
    await chat.run(_script("hi"))
    display.cancel()
    assert "  [reply lost was not published within 0s]" in out.getvalue()
    assert chat.missing == 1


async def test_a_bad_command_is_explained_and_the_chat_goes_on() -> None:
    """A malformed command prints why and sends nothing; later lines still run."""
    chat, pipe, out = _chat([{"llm_calls": 0, "messages": [], "outcomes": []}])
    display = asyncio.create_task(chat.display())
    await chat.run(_script("/wait soon", "hi"))
    display.cancel()
    assert "  [/wait needs a number of seconds, got 'soon']" in out.getvalue()
    assert len(pipe.sent) == 1


class _FailingAgent:
    def __init__(self, error: Exception) -> None:
        self.error = error

    async def turn(self, request: dict[str, object]) -> None:
        raise self.error


async def test_observed_agent_reports_a_failure_and_reraises() -> None:
    """A turn that raises is reported with its request, and the consumer still sees the error."""
    failures: list[tuple[dict[str, object], BaseException]] = []
    error = ProviderError("HTTP 401", kind="fatal", status=401)
    observed = ObservedAgent(_FailingAgent(error), lambda _: None,
                             lambda request, exc: failures.append((request, exc)))
    with pytest.raises(ProviderError):
        await observed.turn({"session_id": "s1", "message": "hi", "id": "m1"})
    assert failures == [({"session_id": "s1", "message": "hi", "id": "m1"}, error)]


class _FailingPipe(_Pipe):
    """The consumer's turn raises instead of answering."""

    def __init__(self, error: Exception) -> None:
        super().__init__(_Replies(), [])
        self.error = error

    async def send_and_wait(self, topic: str, *, key: bytes, value: bytes) -> None:
        assert self.chat is not None
        self.chat.failed(json.loads(value), self.error)


async def test_a_fatal_model_error_ends_the_wait_at_once() -> None:
    """A rejected key cannot pass with retries: the chat says so and moves on without waiting."""
    out = io.StringIO()
    pipe = _FailingPipe(ProviderError("HTTP 401 from the model API", kind="fatal", status=401))
    chat = Chat(session_id="s1", agent_name="ana", producer=pipe, inbound_topic="in",
                replies=_Replies(), out=out, reply_timeout=3600, echo=True)  # type: ignore[arg-type]
    pipe.chat = chat
    await asyncio.wait_for(chat.run(_script("hi")), timeout=30)
    assert "  [the turn failed: ProviderError: HTTP 401 from the model API]" in out.getvalue()
    assert chat.missing == 1


async def test_a_line_the_terminal_cut_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without readline, a line of TTY_LINE_MAX characters is what the terminal left of a
    longer one: the chat says so, and still sends what it got."""
    monkeypatch.setattr(terminal_chat, "_READLINE", None)
    chat, pipe, out = _chat([{"llm_calls": 0, "messages": [], "outcomes": []}] * 2)
    display = asyncio.create_task(chat.display())
    long_line = "x" * dev.TTY_LINE_MAX
    await chat.run(terminal_chat.noting_cuts(_script(long_line, "short"), chat))
    display.cancel()
    said = out.getvalue()
    assert said.count(f"the terminal cut this line at {dev.TTY_LINE_MAX} characters") == 1
    assert [len(str(r["message"])) for r in pipe.sent] == [dev.TTY_LINE_MAX, 5]


async def test_a_message_over_the_record_limit_is_not_sent() -> None:
    """A line too long for MAX_RECORD_BYTES is refused in the chat with the limit named,
    instead of vanishing into the dead-letter topic."""
    chat, pipe, out = _chat([])
    chat.max_record_bytes = 200
    await chat.run(_script("y" * 500))
    assert pipe.sent == []
    assert "MAX_RECORD_BYTES (200)" in out.getvalue()


def test_the_session_option_says_every_run_starts_fresh() -> None:
    """``--session`` does not promise to resume: its help says every run starts empty."""
    import argparse

    parser = argparse.ArgumentParser()
    dev.add_arguments(parser)
    help_text = " ".join(parser.format_help().split())
    assert "every run starts with empty servers" in help_text


def test_turn_wait_follows_the_model_timeout() -> None:
    """The chat waits for a turn in proportion to the model timeout: three calls (understand,
    a summary, speak) plus one per tool round when the agent has tools, and a 30 s margin."""
    from engine import Agent
    from engine.providers import OpenAIProvider, RuleProvider

    def agent(timeout: float, tools: dict[str, object] | None) -> Agent:
        return Agent(name="a", provider=OpenAIProvider("", base_url="http://127.0.0.1:1/v1",
                                                       timeout=timeout), max_tool_loops=2,
                     tools=tools, flows=[{"id": "f", "on": [{"message": []}],
                                          "steps": [{"id": "s", "say": "hi"}]}])

    lookup = {"lookup": {"description": "d", "handler": lambda: {}}}
    assert turn_wait_s(agent(120, None)) == 3 * 120 + 30
    assert turn_wait_s(agent(120, lookup)) == (3 + 2) * 120 + 30
    assert turn_wait_s(agent(5, None)) == 60  # never under a minute
    assert turn_wait_s(Agent(name="r", provider=RuleProvider(), flows=[
        {"id": "f", "on": [{"message": []}], "steps": [{"id": "s", "say": "hi"}]}])) == 60
    assert turn_wait_s(None) == 60


def test_a_key_error_subclass_is_not_a_missing_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a plain KeyError is ``os.environ[...]``: a subclass raised while the agent is built
    (zoneinfo's unknown time zone is one) keeps its own message."""
    from zoneinfo import ZoneInfoNotFoundError

    from consumer.errors import AgentImportError, DevError

    def load(cause: Exception) -> None:
        def fail(path: str) -> None:
            raise AgentImportError(f"building the agent {path!r} failed: {cause}") from cause

        monkeypatch.setattr(dev, "load_agent", fail)

    load(ZoneInfoNotFoundError("No time zone found with key Europe/Lisbn"))
    with pytest.raises(DevError) as caught:
        dev.load_dev_agent("shop:agent")
    assert "needs the environment variable" not in str(caught.value)
    assert "Europe/Lisbn" in str(caught.value)

    load(KeyError("TURNFLOW_TEST_UNSET_KEY"))
    with pytest.raises(DevError, match="needs the environment variable TURNFLOW_TEST_UNSET_KEY"):
        dev.load_dev_agent("shop:agent")
