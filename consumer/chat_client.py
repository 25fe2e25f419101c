"""The chat client: a conversation with the agent through the real topics.

An input is produced to ``inbound.turns`` as a channel adapter would write it; replies are read
back from ``outbound.messages`` as a delivery worker would read them (``ReplyReader``), and the
DLQ topic from its end (``DeadLetterReader``), so an input the consumer dead-letters is known at
once. The consumer's agent is wrapped in ``ObservedAgent``, which hands each turn's request and
result (outcomes, ``llm_calls``, ``link_fixes``) to the chat: what the topics do not carry.

``Chat`` is the terminal's view of it (``turnflow dev``); the inspector's test console
(``consumer.inspect.console``) is another view of the same pieces.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from consumer.chat_lines import ChatLine, parse_chat_lines
from consumer.errors import first_line as _first_line
from consumer.topics import partitions_of
from engine import ProviderError, TurnRequestError
from engine.keys import session_tag

if TYPE_CHECKING:
    from consumer.terminal_chat import TerminalLines

__all__ = [
    "Chat",
    "DeadLetterNotice",
    "DeadLetterReader",
    "ObservedAgent",
    "ObservedTurn",
    "ReplyReader",
    "field_of",
    "format_outcomes",
    "markers",
    "message_input",
    "produce",
    "read_dead_letter",
]


@dataclass(frozen=True)
class ObservedTurn:
    """One turn the in-process consumer ran: what went in and what came out."""

    request: dict[str, Any]
    result: Any


class ObservedAgent:
    """Delegates every attribute to the agent and reports each ``turn()`` to ``on_turn``.

    The consumer holds this object as its agent; nothing else about it changes. Reporting never
    fails a turn.
    """

    def __init__(
        self,
        agent: Any,
        on_turn: Callable[[ObservedTurn], None],
        on_error: Callable[[dict[str, Any], BaseException], None] | None = None,
    ) -> None:
        self._agent = agent
        self._on_turn = on_turn
        self._on_error = on_error

    async def turn(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = await self._agent.turn(request, *args, **kwargs)
        except Exception as exc:
            if self._on_error is not None:
                with contextlib.suppress(Exception):  # observing must never break a turn
                    self._on_error(_as_dict(request), exc)
            raise
        with contextlib.suppress(Exception):
            self._on_turn(ObservedTurn(_as_dict(request), result))
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agent, name)


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        dumped = dump()
        if isinstance(dumped, dict):
            return dumped
    return {}


def field_of(value: Any, name: str, default: Any = None) -> Any:
    if isinstance(value, dict):
        return value.get(name, default)
    return getattr(value, name, default)


def format_outcomes(result: Any) -> str:
    """The per-turn footer: ``llm_calls`` and one short item per outcome line (runs starting and
    ending are outcome lines too)."""
    items = []
    for outcome in field_of(result, "outcomes", []) or []:
        where = "/".join(
            str(p) for p in (field_of(outcome, "flow_id"), field_of(outcome, "step_id")) if p
        )
        what = field_of(outcome, "code") or field_of(outcome, "status") or "?"
        detail = field_of(outcome, "detail")
        item = f"{where} {what}" if where else str(what)
        items.append(f"{item} ({detail})" if detail else item)
    summary = "; ".join(items) if items else "nothing to report"
    return f"llm_calls={field_of(result, 'llm_calls', 0)} | {summary}"


class ReplyReader:
    """Reads ``outbound.messages`` from its end and hands out this session's records by key.

    Not a consumer group member: it assigns every partition itself and starts at the end, so it
    commits nothing and never competes with a delivery worker.
    """

    def __init__(self, consumer: Any, topic: str, session_id: str) -> None:
        self._consumer = consumer
        self._topic = topic
        self._session_id = session_id
        self._records: dict[str, dict[str, Any]] = {}
        self._arrived = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        from aiokafka import TopicPartition

        await self._consumer.start()
        partitions = await partitions_of(self._consumer, self._topic)
        assigned = [TopicPartition(self._topic, p) for p in sorted(partitions)]
        self._consumer.assign(assigned)
        await self._consumer.seek_to_end(*assigned)
        for partition in assigned:  # resolve the end offsets now, before any input is sent
            await self._consumer.position(partition)
        self._task = asyncio.create_task(self._read(), name="dev-replies")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._consumer.stop()

    async def _read(self) -> None:
        async for record in self._consumer:
            try:
                value = json.loads(record.value)
            except (TypeError, ValueError):
                continue
            if not isinstance(value, dict) or not self.wants(value.get("session_id")):
                continue
            async with self._arrived:
                self._records[str(value.get("key"))] = value
                self._arrived.notify_all()

    def wants(self, session_id: Any) -> bool:
        """Whether a reply of ``session_id`` is one of this reader's (its one session here)."""
        return bool(session_id == self._session_id)

    async def wait_for(self, key: str, within: float) -> dict[str, Any] | None:
        """The published record with this key, or None when it did not come ``within`` s."""

        async def arrived() -> dict[str, Any]:
            async with self._arrived:
                await self._arrived.wait_for(lambda: key in self._records)
                return self._records[key]

        try:
            return await asyncio.wait_for(arrived(), within)
        except TimeoutError:
            return None


@dataclass(frozen=True)
class DeadLetterNotice:
    """What the chat needs of one dead letter: where its input was read from (the consumer's
    ``source-*`` headers) and, when the record travelled whole, its session and input id."""

    source: tuple[str, int, int] | None
    reason: str
    detail: str
    session_id: str | None = None
    input_id: str | None = None


def read_dead_letter(headers: Iterable[tuple[str, bytes]] | None, value: bytes | None
                     ) -> DeadLetterNotice:
    """The notice of one DLQ record; any header or value it lacks, or cannot read, is None."""
    own: dict[str, str] = {}
    for name, raw in headers or ():
        if name not in own:  # the consumer's own headers come first
            own[name] = bytes(raw).decode("utf-8", "replace")
    source: tuple[str, int, int] | None = None
    with contextlib.suppress(KeyError, ValueError):
        source = (own["source-topic"], int(own["source-partition"]), int(own["source-offset"]))
    session_id = input_id = None
    with contextlib.suppress(TypeError, ValueError):
        parsed = json.loads(value or b"")
        if isinstance(parsed, dict):
            session_id = parsed["session_id"] if isinstance(parsed.get("session_id"), str) else None
            marker = parsed.get("id") or parsed.get("key")
            input_id = marker if isinstance(marker, str) else None
    return DeadLetterNotice(source, own.get("error", "?"), own.get("detail", ""), session_id,
                            input_id)


class DeadLetterReader(ReplyReader):
    """Reads the DLQ topic from its end, like ``ReplyReader`` the replies, and hands every dead
    letter to ``on_letter``: the chat learns at once that an input will get no turn."""

    def __init__(self, consumer: Any, topic: str, on_letter: Callable[[DeadLetterNotice], None]
                 ) -> None:
        super().__init__(consumer, topic, session_id="")
        self._on_letter = on_letter

    async def _read(self) -> None:
        async for record in self._consumer:
            with contextlib.suppress(Exception):  # one odd record never stops the reading
                self._on_letter(read_dead_letter(record.headers, record.value))


class Chat:
    """Sends the customer's lines, prints each turn's replies, outcomes and ``llm_calls``.

    Turns are printed in the order the consumer ran them, including the ones nobody typed for
    (a timer firing). A typed input is done when its turn has been printed.
    """

    def __init__(
        self,
        *,
        session_id: str,
        agent_name: str,
        producer: Any,
        inbound_topic: str,
        replies: ReplyReader,
        out: TextIO,
        reply_timeout: float,
        echo: bool,
    ) -> None:
        self.session_id = session_id
        self._agent_name = agent_name
        self._producer = producer
        self._inbound_topic = inbound_topic
        self._replies = replies
        self._out = out
        self._reply_timeout = reply_timeout
        self._echo = echo
        self._turns: asyncio.Queue[ObservedTurn] = asyncio.Queue()
        self._shown: dict[str, asyncio.Event] = {}
        self._sent = 0
        self._sent_at: dict[tuple[str, int, int], str] = {}  # where each input landed
        self._early_letters: dict[tuple[str, int, int], DeadLetterNotice] = {}
        self.missing = 0  # inputs or replies that never showed up
        self.prompt: TerminalLines | None = None
        self.log_path: Path = Path(".turnflow") / "dev.log"
        self.max_record_bytes: int | None = None  # MAX_RECORD_BYTES of the consumer

    def observe(self, turn: ObservedTurn) -> None:
        """Called by ``ObservedAgent`` inside the consumer; only this session's turns count."""
        if turn.request.get("session_id") == self.session_id:
            self._turns.put_nowait(turn)

    def failed(self, request: dict[str, Any], error: BaseException) -> None:
        """A turn raised (the consumer retries it or dead-letters it): say so now, and stop
        waiting for an input that retrying cannot help."""
        if request.get("session_id") != self.session_id:
            return
        self.say(f"  [the turn failed: {type(error).__name__}: {_first_line(error)}]")
        hopeless = isinstance(error, TurnRequestError) or (
            isinstance(error, ProviderError) and error.kind == "fatal"
        )
        if hopeless:
            for marker in markers(request):
                if marker in self._shown:
                    self.missing += 1
                    self._shown[marker].set()

    def dead_lettered(self, letter: DeadLetterNotice) -> None:
        """The consumer sent one of this chat's inputs to the DLQ: no turn will run for it, so
        say why now instead of waiting out the turn timeout."""
        input_id = self._sent_at.get(letter.source) if letter.source else None
        if input_id is None and letter.session_id == self.session_id:
            input_id = letter.input_id
        if input_id is None or input_id not in self._shown:
            if letter.source is not None and letter.session_id in (None, self.session_id):
                # It may be ours, read before its send returned; a few are enough to keep.
                self._early_letters[letter.source] = letter
                while len(self._early_letters) > 64:
                    self._early_letters.pop(next(iter(self._early_letters)))
            return
        self._report_dead_letter(input_id, letter)

    def _report_dead_letter(self, input_id: str, letter: DeadLetterNotice) -> None:
        event = self._shown.get(input_id)
        if event is None or event.is_set():
            return
        detail = f": {letter.detail}" if letter.detail else ""
        self.say(f"  [input {input_id} was sent to the dead-letter topic ({letter.reason}"
                 f"{detail}); no turn will run for it; see {self.log_path}]")
        self.missing += 1
        event.set()

    def say(self, line: str) -> None:
        if self.prompt is not None and self.prompt.at_prompt:
            # A timer fired while the user sits at the prompt: print above it, then redraw it.
            self._out.write(f"\r\033[K{line}\n{self.prompt.PROMPT}")
        else:
            self._out.write(line + "\n")
        self._out.flush()

    async def display(self) -> None:
        """Print every observed turn, in order, forever (cancelled on exit)."""
        while True:
            turn = await self._turns.get()
            try:
                await self._show(turn)
            finally:
                self._turns.task_done()

    async def _show(self, turn: ObservedTurn) -> None:
        request, result = turn.request, turn.result
        if request.get("wake"):
            # The chat has one conversation: its tag in the key is noise on screen.
            shown = str(request["wake"]).replace(f"@{session_tag(self.session_id)}", "", 1)
            self.say(f"  [timer fired: {shown}]")
        for message in field_of(result, "messages", []) or []:
            key = str(field_of(message, "key"))
            record = await self._replies.wait_for(key, self._reply_timeout)
            if record is None:
                self.missing += 1
                self.say(f"  [reply {key} was not published within {self._reply_timeout:.0f}s]")
                continue
            after_ms = int(record.get("after_ms") or 0)
            if after_ms:
                await asyncio.sleep(after_ms / 1000)  # what a delivery worker would wait
            pause = f" (after {after_ms} ms)" if after_ms else ""
            self.say(f"{self._agent_name}> {record.get('text')}{pause}")
        self.say(f"  [{format_outcomes(result)}]")
        for marker in markers(request):
            if marker in self._shown:
                self._shown[marker].set()

    async def send(self, line: ChatLine) -> None:
        """Produce one input (or a burst's messages together) and wait until its turn has been
        printed, or the consumer dead-lettered it, or the wait timed out."""
        values: list[tuple[str, dict[str, Any]]] = []
        if line.kind in ("message", "burst"):
            texts = line.messages if line.kind == "burst" else (line.text,)
            if len(texts) > 1:
                self.say(f"  [burst of {len(texts)} messages sent together]")
            for text in texts:
                self._sent += 1
                input_id = f"{self.session_id}-m{self._sent}"
                if self._echo or len(texts) > 1:
                    self.say(f"you> {text}")
                values.append((input_id, message_input(self.session_id, input_id, text)))
        else:
            self._sent += 1
            input_id = f"{self.session_id}-e{self._sent}"
            self.say(f"  [event {line.event} sent]")
            values.append((input_id, {"session_id": self.session_id, "event": line.event,
                                      "payload": line.payload, "key": input_id}))
        encoded = [(input_id, json.dumps(value).encode()) for input_id, value in values]
        for _, record in encoded:
            if self.max_record_bytes is not None and len(record) > self.max_record_bytes:
                self.say(f"  [not sent: this input is {len(record)} bytes and the consumer "
                         f"refuses records over MAX_RECORD_BYTES ({self.max_record_bytes})]")
                return
        shown = {input_id: asyncio.Event() for input_id, _ in encoded}
        self._shown.update(shown)
        try:
            sent = await self._produce([record for _, record in encoded])
            for (input_id, _), where in zip(encoded, sent, strict=True):
                if where is None:
                    continue
                self._sent_at[where] = input_id
                if (letter := self._early_letters.pop(where, None)) is not None:
                    self._report_dead_letter(input_id, letter)
            await asyncio.wait_for(
                asyncio.gather(*(event.wait() for event in shown.values())), self._reply_timeout
            )
        except TimeoutError:
            self.missing += 1
            self.say(f"  [no turn ran for this input within {self._reply_timeout:.0f}s; "
                     f"see {self.log_path}]")
        finally:
            for input_id in shown:
                self._shown.pop(input_id, None)

    async def _produce(self, records: list[bytes]) -> list[tuple[str, int, int] | None]:
        return await produce(self._producer, self._inbound_topic, self.session_id, records)

    async def settle(self) -> None:
        """Wait until every turn already observed has been printed."""
        await self._turns.join()

    async def run(self, lines: AsyncIterator[str]) -> None:
        async for chunk in lines:
            for line in parse_chat_lines(chunk):
                if isinstance(line, ValueError):
                    self.say(f"  [{line}]")
                    continue
                if line.kind == "quit":
                    await self.settle()
                    return
                if line.kind == "wait":
                    self.say(f"  [waiting {line.seconds:g}s]")
                    await asyncio.sleep(line.seconds)
                    continue
                await self.send(line)
        await self.settle()


def message_input(session_id: str, input_id: str, text: str) -> dict[str, Any]:
    """A customer's message as a channel adapter writes it to ``inbound.turns``. ``at`` is when
    it was typed, as a channel reports it; the turn runs a moment later, so the reply is after
    it and the silence clock starts from the reply."""
    return {"session_id": session_id, "message": text, "id": input_id,
            "at": datetime.now(UTC).isoformat()}


async def produce(producer: Any, topic: str, session_id: str, records: list[bytes]
                  ) -> list[tuple[str, int, int] | None]:
    """Send the records in order, keyed by the session, all in one batch when there are several
    (so the consumer fetches a burst together and answers it as one turn); where each landed."""
    key = session_id.encode()
    send = getattr(producer, "send", None)
    if len(records) == 1 or send is None:
        results = [await producer.send_and_wait(topic, key=key, value=r) for r in records]
    else:
        futures = [await send(topic, key=key, value=r) for r in records]
        results = [await future for future in futures]
    return [_landed_at(topic, result) for result in results]


def markers(request: dict[str, Any]) -> list[str]:
    """The ids of every input a turn answered: its own, and a burst's earlier messages'."""
    markers = [str(m) for m in (request.get("id") or request.get("key"),) if m]
    for earlier in request.get("burst") or ():
        if isinstance(earlier, dict) and earlier.get("id"):
            markers.append(str(earlier["id"]))
    return markers


def _landed_at(topic: str, metadata: Any) -> tuple[str, int, int] | None:
    """Topic, partition and offset of a sent record, from the producer's record metadata."""
    partition, offset = getattr(metadata, "partition", None), getattr(metadata, "offset", None)
    if isinstance(partition, int) and isinstance(offset, int):
        return (str(getattr(metadata, "topic", topic)), partition, offset)
    return None
