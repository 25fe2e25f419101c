"""``turnflow dev`` without servers: bursts typed or pasted, dead letters read back from the
DLQ, and the metrics port the chat picks."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer.devchat.dev import (
    Chat,
    ChatLine,
    ObservedTurn,
    dev_metrics,
    parse_chat_line,
    parse_chat_lines,
    read_dead_letter,
)
from consumer.settings import DEFAULT_METRICS_PORTS, Settings


async def _script(*chunks: str) -> AsyncIterator[str]:
    for chunk in chunks:
        yield chunk


# --- what a burst is -----------------------------------------------------------------------------


def test_burst_command_splits_on_bars() -> None:
    line = parse_chat_line("/burst hi | my name is Lee |  I need a flat tire fix ")
    assert line == ChatLine("burst", messages=("hi", "my name is Lee", "I need a flat tire fix"))


@pytest.mark.parametrize("line", ["/burst", "/burst  |  | "])
def test_an_empty_burst_is_refused(line: str) -> None:
    with pytest.raises(ValueError, match="/burst needs messages"):
        parse_chat_line(line)


def test_lines_pasted_together_are_a_burst_up_to_the_next_command() -> None:
    parsed = parse_chat_lines("hi\nmy name is Lee\n\n/wait 1\nok\n/nope")
    assert parsed[:3] == [
        ChatLine("burst", messages=("hi", "my name is Lee")),
        ChatLine("wait", seconds=1.0),
        ChatLine("message", text="ok"),
    ]
    assert isinstance(parsed[3], ValueError) and "unknown command /nope" in str(parsed[3])
    assert parse_chat_lines("just one") == [ChatLine("message", text="just one")]


@dataclass
class _Meta:
    topic: str
    partition: int
    offset: int


class _BurstPipe:
    """Stands in for the producer and the consumer: records sent by ``send`` are appended to
    the log; once ``answer_after`` of them are in, one turn answers them all, as the consumer
    answers a burst fetched together."""

    def __init__(self, answer_after: int) -> None:
        self.answer_after = answer_after
        self.log: list[dict[str, Any]] = []
        self.chat: Chat | None = None

    async def send(self, topic: str, *, key: bytes, value: bytes) -> asyncio.Future[_Meta]:
        self.log.append(json.loads(value))
        future: asyncio.Future[_Meta] = asyncio.get_running_loop().create_future()
        future.set_result(_Meta(topic, 0, len(self.log) - 1))
        if len(self.log) % self.answer_after == 0:
            *earlier, last = self.log[-self.answer_after:]
            request = {**last, "burst": [{"message": e["message"], "id": e["id"]}
                                         for e in earlier]}
            assert self.chat is not None
            self.chat.observe(ObservedTurn(request, {"llm_calls": 1, "messages": [],
                                                     "outcomes": []}))
        return future

    async def send_and_wait(self, topic: str, *, key: bytes, value: bytes) -> _Meta:
        return await (await self.send(topic, key=key, value=value))


def _chat(producer: Any, timeout: float = 3600) -> tuple[Chat, io.StringIO]:
    out = io.StringIO()
    chat = Chat(session_id="s1", agent_name="ana", producer=producer, inbound_topic="in",
                replies=None, out=out, reply_timeout=timeout, echo=True)  # type: ignore[arg-type]
    return chat, out


async def test_a_burst_goes_out_in_order_and_one_turn_answers_it() -> None:
    """The three messages are sent together, in order, each with its own id; the one turn that
    answers them ends the wait for all three."""
    pipe = _BurstPipe(answer_after=3)
    chat, out = _chat(pipe)
    pipe.chat = chat
    display = asyncio.create_task(chat.display())
    try:
        await asyncio.wait_for(
            chat.run(_script("/burst hi | my name is Lee | I need a flat tire fix")), 10)
    finally:
        display.cancel()
    assert [r["message"] for r in pipe.log] == ["hi", "my name is Lee", "I need a flat tire fix"]
    assert len({r["id"] for r in pipe.log}) == 3
    assert chat.missing == 0
    said = out.getvalue()
    assert "[burst of 3 messages sent together]" in said
    assert said.count("[llm_calls=1") == 1


async def test_a_pasted_chunk_is_sent_as_a_burst() -> None:
    pipe = _BurstPipe(answer_after=2)
    chat, _ = _chat(pipe)
    pipe.chat = chat
    display = asyncio.create_task(chat.display())
    try:
        await asyncio.wait_for(chat.run(_script("hi\nmy name is Lee")), 10)
    finally:
        display.cancel()
    assert [r["message"] for r in pipe.log] == ["hi", "my name is Lee"]
    assert chat.missing == 0


# --- dead letters --------------------------------------------------------------------------------


def _letter_headers(offset: int, topic: str = "in") -> list[tuple[str, bytes]]:
    return [("error", b"model-failed"), ("detail", b"ProviderError after 2 tries"),
            ("source-topic", topic.encode()), ("source-partition", b"0"),
            ("source-offset", str(offset).encode())]


class _DeadLetteringPipe:
    """The consumer gives up on every input: a dead letter comes back from the DLQ, before or
    after the producer's acknowledgement, with the record whole or kept aside (empty value)."""

    def __init__(self, *, early: bool, whole: bool, session: str = "s1") -> None:
        self.early, self.whole, self.session = early, whole, session
        self.chat: Chat | None = None
        self.offset = 41

    async def send_and_wait(self, topic: str, *, key: bytes, value: bytes) -> _Meta:
        self.offset += 1
        record = json.loads(value)
        record["session_id"] = self.session
        letter = read_dead_letter(_letter_headers(self.offset),
                                  json.dumps(record).encode() if self.whole else b"")
        assert self.chat is not None
        if self.early:
            self.chat.dead_lettered(letter)
            return _Meta(topic, 0, self.offset)
        asyncio.get_running_loop().call_later(0.01, self.chat.dead_lettered, letter)
        return _Meta(topic, 0, self.offset)


@pytest.mark.parametrize("early", [True, False])
@pytest.mark.parametrize("whole", [True, False])
async def test_a_dead_lettered_input_ends_the_wait_at_once(early: bool, whole: bool) -> None:
    pipe = _DeadLetteringPipe(early=early, whole=whole)
    chat, out = _chat(pipe)
    pipe.chat = chat
    await asyncio.wait_for(chat.run(_script("hi", "/event paid {}")), 10)
    said = out.getvalue()
    assert said.count("was sent to the dead-letter topic (model-failed: ProviderError after 2 "
                      "tries); no turn will run for it") == 2
    assert chat.missing == 2


async def test_another_conversations_dead_letter_is_not_taken_for_ours() -> None:
    """A dead letter from elsewhere in the topic (another offset) ends no wait of this chat."""
    chat, out = _chat(None, timeout=0.3)
    chat._shown["s1-m1"] = asyncio.Event()
    chat._sent_at[("in", 0, 7)] = "s1-m1"
    value = json.dumps({"session_id": "s2", "message": "hi", "id": "s1-m1"}).encode()
    chat.dead_lettered(read_dead_letter(_letter_headers(8), value))
    chat.dead_lettered(read_dead_letter(_letter_headers(7, topic="other"), value))
    assert not chat._shown["s1-m1"].is_set()
    assert "dead-letter" not in out.getvalue()


@given(
    headers=st.lists(st.tuples(st.sampled_from(["error", "detail", "source-topic",
                                                "source-partition", "source-offset", "x"]),
                               st.binary(max_size=40)), max_size=8),
    value=st.one_of(st.none(), st.binary(max_size=200),
                    st.text(max_size=100).map(lambda t: t.encode("utf-8", "surrogatepass"))),
)
def test_any_dlq_record_is_read_without_raising(
    headers: list[tuple[str, bytes]], value: bytes | None
) -> None:
    notice = read_dead_letter(headers, value)
    assert notice.source is None or isinstance(notice.source[2], int)
    assert isinstance(notice.reason, str) and isinstance(notice.detail, str)


def test_any_json_value_is_read_without_raising() -> None:
    for value in (b"[]", b"1", b'{"session_id": 5, "id": [1]}', b'{"key": "k", "session_id": "s"}'):
        notice = read_dead_letter(_letter_headers(1), value)
        assert notice.input_id in (None, "k")


# --- the metrics port ----------------------------------------------------------------------------


def test_unset_metrics_port_is_a_free_one_on_localhost(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("METRICS_PORT", raising=False)
    monkeypatch.delenv("METRICS_HOST", raising=False)
    chosen = dev_metrics(Settings())
    assert chosen.metrics_host == "127.0.0.1"
    assert chosen.metrics_port not in (None, 0, DEFAULT_METRICS_PORTS["consume"])


def test_set_metrics_port_and_host_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("METRICS_PORT", "9311")
    monkeypatch.setenv("METRICS_HOST", "0.0.0.0")
    chosen = dev_metrics(Settings())
    assert (chosen.metrics_host, chosen.metrics_port) == ("0.0.0.0", 9311)
    monkeypatch.setenv("METRICS_PORT", "0")
    assert dev_metrics(Settings()).metrics_port == 0


async def test_lines_pasted_at_the_terminal_arrive_as_one_chunk() -> None:
    """Lines that reach the terminal together (a paste) come out as one chunk, which the chat
    sends as a burst; a line typed later is its own; the end of input ends the chunks."""
    from consumer.devchat.dev import TerminalLines

    terminal = TerminalLines()
    for line in ("hi", "my name is Lee", "I need a flat tire fix"):
        terminal._queue.put_nowait(line)
    chunks = terminal._lines()
    assert await anext(chunks) == "hi\nmy name is Lee\nI need a flat tire fix"

    async def type_later() -> None:
        await asyncio.sleep(0.3)
        terminal._queue.put_nowait("yes")
        await asyncio.sleep(0.3)
        terminal._queue.put_nowait(None)

    typing = asyncio.create_task(type_later())
    assert await anext(chunks) == "yes"
    with pytest.raises(StopAsyncIteration):
        await anext(chunks)
    await typing


@given(chunk=st.text(max_size=300))
def test_any_typed_or_pasted_text_is_read_without_raising(chunk: str) -> None:
    """Whatever reaches the chat, each line is a chat line or its error, never an exception
    out of the reading; every message typed is in exactly one message or burst."""
    parsed = parse_chat_lines(chunk)
    assert all(isinstance(p, ChatLine | ValueError) for p in parsed)
    sent = [m for p in parsed if isinstance(p, ChatLine) and p.kind in ("message", "burst")
            for m in (p.messages or (p.text,))]
    typed: list[str] = []
    for line in (raw.strip() for raw in chunk.split("\n")):
        if line.startswith("/burst") and line.partition(" ")[0] == "/burst":
            typed += [part.strip() for part in line.partition(" ")[2].split("|") if part.strip()]
        elif line and not line.startswith(("#", "/")):
            typed.append(line)
    assert sent == typed
