"""``turnflow dev``: the whole service in one process, with a terminal chat.

It starts (or reuses) an embedded PostgreSQL and an embedded broker unless ``DATABASE_URL`` /
``KAFKA_BOOTSTRAP_SERVERS`` point at real ones, migrates, creates the topics, runs the consumer
and the scheduler, and chats with the agent *through the topics*: a typed line is produced to
``inbound.turns`` like any channel adapter would, and replies are read back from
``outbound.messages`` like any delivery worker would. So what the chat shows is what production
would send, after the save.

Per turn the chat also prints the outcome lines and ``llm_calls``; it learns them by wrapping the
agent (``ObservedAgent``) the in-process consumer runs. Turns nobody typed for — a timer firing,
a silence follow-up — are printed as they happen. It also reads the DLQ topic from its end, so
an input the consumer dead-letters is reported at once instead of waited for. Several lines
pasted at once, or ``/burst A | B | C``, go out together as a burst, as a customer typing fast
sends them, and the consumer answers them as one turn.

Every startup failure a newcomer can meet ends in one line (``DevError``): a port in use, a
missing environment variable, an agent that fails to import or validate, a server that does not
answer.

Every run starts fresh: the embedded broker keeps its records in memory, so the run gets a new,
empty database to match (a turn log kept from an earlier run would take the new broker's offsets
for replays). The banner says so. With ``DATABASE_URL`` set and the embedded broker, the run's
topics are named for the run instead (the configured name and a run id), since the turn log
knows a record by topic, partition and offset: one database keeps recording after recording.
In a terminal the chat has line editing and history (``readline``; the history is kept in
``.turnflow/chat_history``). Ctrl-C ends it with exit code 0, and so do SIGTERM and SIGHUP,
after stopping what the run started (the embedded PostgreSQL included). Unless ``METRICS_PORT``
is set, the metrics port is a free one the kernel picks, on 127.0.0.1 unless ``METRICS_HOST``
says otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from pydantic import ValidationError
from sqlalchemy.engine import make_url

from consumer.agents import load_agent
from consumer.embedded_broker import EmbeddedBroker, free_port
from consumer.errors import AgentImportError, ConsumerError, DevError, EmbeddedBrokerError
from consumer.logs import JsonFormatter
from consumer.parser import MAX_SESSION_ID_CHARS
from consumer.scheduler import Scheduler, build_scheduler
from consumer.service import ConsumerService
from consumer.settings import Settings
from consumer.topics import TopicSpec, ensure_topics, partitions_of
from engine import Agent, FlowConfigurationError, ProviderError, TurnRequestError
from engine.keys import session_tag
from engine.recording import recorded_agent
from store import EmbeddedPostgres, EmbeddedServerError, Store
from store.migrate import upgrade_async
from store.urls import plain_url

__all__ = [
    "DEFAULT_AGENT",
    "ChatLine",
    "DevError",
    "DevOptions",
    "ObservedAgent",
    "ObservedTurn",
    "add_arguments",
    "format_outcomes",
    "main",
    "options_from",
    "parse_chat_line",
    "run",
    "run_dev",
]

DEFAULT_AGENT = "examples.demo_agent:agent"


# --- the agent the consumer runs, observed ------------------------------------------------------


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


def _get(value: Any, name: str, default: Any = None) -> Any:
    if isinstance(value, dict):
        return value.get(name, default)
    return getattr(value, name, default)


def format_outcomes(result: Any) -> str:
    """The per-turn footer: ``llm_calls`` and one short item per outcome line (runs starting and
    ending are outcome lines too)."""
    items = []
    for outcome in _get(result, "outcomes", []) or []:
        where = "/".join(str(p) for p in (_get(outcome, "flow_id"), _get(outcome, "step_id")) if p)
        what = _get(outcome, "code") or _get(outcome, "status") or "?"
        detail = _get(outcome, "detail")
        item = f"{where} {what}" if where else str(what)
        items.append(f"{item} ({detail})" if detail else item)
    summary = "; ".join(items) if items else "nothing to report"
    return f"llm_calls={_get(result, 'llm_calls', 0)} | {summary}"


# --- what a chat line means ---------------------------------------------------------------------


@dataclass(frozen=True)
class ChatLine:
    """One parsed chat or script line."""

    kind: str  # "message" | "burst" | "event" | "wait" | "quit" | "skip"
    text: str = ""
    seconds: float = 0.0
    event: str = ""
    payload: dict[str, Any] = field(default_factory=dict)
    messages: tuple[str, ...] = ()  # a burst's messages, oldest first


HELP = (
    "Type a message. /burst A | B | C sends several messages at once (so does pasting several "
    "lines), /event NAME [JSON] sends an event, /wait SECONDS waits (timers keep firing), "
    "/quit leaves."
)


def parse_chat_line(line: str) -> ChatLine:
    """Read one line: a message, or a ``/command``. Raises ``ValueError`` on a bad command."""
    text = line.strip()
    if not text or text.startswith("#"):
        return ChatLine("skip")
    if not text.startswith("/"):
        return ChatLine("message", text=text)
    command, _, rest = text.partition(" ")
    rest = rest.strip()
    if command in ("/quit", "/exit"):
        return ChatLine("quit")
    if command == "/burst":
        messages = tuple(part.strip() for part in rest.split("|") if part.strip())
        if not messages:
            raise ValueError("/burst needs messages separated by |, e.g. /burst hi | I'm Lee")
        return ChatLine("burst", messages=messages)
    if command == "/wait":
        try:
            seconds = float(rest)
        except ValueError:
            raise ValueError(f"/wait needs a number of seconds, got {rest!r}") from None
        if seconds < 0:
            raise ValueError("/wait needs a non-negative number of seconds")
        return ChatLine("wait", seconds=seconds)
    if command == "/event":
        name, _, raw = rest.partition(" ")
        if not name:
            raise ValueError("/event needs a name, e.g. /event paid {\"amount\": 10}")
        payload: Any = {}
        if raw.strip():
            try:
                payload = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ValueError(f"/event payload is not JSON: {exc.msg}") from None
            if not isinstance(payload, dict):
                raise ValueError("/event payload must be a JSON object")
        return ChatLine("event", event=name, payload=payload)
    raise ValueError(f"unknown command {command}; {HELP}")


def parse_chat_lines(chunk: str) -> list[ChatLine | ValueError]:
    """Read what arrived at once (several lines pasted together): each line as
    ``parse_chat_line`` reads it, except that plain messages next to each other go out together
    as one burst, as a customer typing fast sends them. A bad command is returned as its error,
    in its place."""
    parsed: list[ChatLine | ValueError] = []
    for raw in chunk.split("\n"):
        try:
            line = parse_chat_line(raw)
        except ValueError as exc:
            parsed.append(exc)
            continue
        if line.kind == "skip":
            continue
        previous = parsed[-1] if parsed else None
        if line.kind == "message" and isinstance(previous, ChatLine) and previous.kind in (
            "message", "burst"
        ):
            earlier = previous.messages or (previous.text,)
            parsed[-1] = ChatLine("burst", messages=(*earlier, line.text))
            continue
        parsed.append(line)
    return parsed


# --- the chat: inputs out through inbound.turns, replies in from outbound.messages --------------


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
            if not isinstance(value, dict) or value.get("session_id") != self._session_id:
                continue
            async with self._arrived:
                self._records[str(value.get("key"))] = value
                self._arrived.notify_all()

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
            for marker in _markers(request):
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
        for message in _get(result, "messages", []) or []:
            key = str(_get(message, "key"))
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
        for marker in _markers(request):
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
                # ``at`` is when the line was typed, as a channel reports it; the turn runs a
                # moment later, so the reply is after it and the silence clock starts from the
                # reply.
                values.append((input_id, {"session_id": self.session_id, "message": text,
                                          "id": input_id, "at": datetime.now(UTC).isoformat()}))
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
        """Send the records in order, all in one batch when there are several (so the consumer
        fetches a burst together and answers it as one turn); where each landed."""
        key = self.session_id.encode()
        send = getattr(self._producer, "send", None)
        if len(records) == 1 or send is None:
            results = [await self._producer.send_and_wait(self._inbound_topic, key=key, value=r)
                       for r in records]
        else:
            futures = [await send(self._inbound_topic, key=key, value=r) for r in records]
            results = [await future for future in futures]
        return [_landed_at(self._inbound_topic, result) for result in results]

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


def _markers(request: dict[str, Any]) -> list[str]:
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


# --- the consumer and the scheduler, in this process --------------------------------------------


class DevServices:
    """``turnflow consume`` and ``turnflow schedule`` as two tasks of this process."""

    def __init__(self, settings: Settings, agent: Any) -> None:
        self._settings = settings
        self._agent = agent
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._store: Store | None = None
        self.consumer: ConsumerService | None = None
        self.scheduler: Scheduler | None = None

    async def start(self, ready_within: float = 60.0) -> None:
        s = self._settings
        bootstrap = s.kafka_bootstrap_servers or ""
        options = s.kafka_client_options()
        self._store = await Store.connect(s.database_url or "", pool_size=5)
        self.consumer = ConsumerService(
            s, self._agent, store=self._store, metrics_exports=("consume", "schedule")
        )
        self.scheduler = build_scheduler(
            self._store,
            bootstrap_servers=bootstrap,
            schedule_topic=s.schedule_topic,
            inbound_topic=s.inbound_topic,
            group_id=f"{s.group_id}-scheduler",
            client_options=options,
        )
        self._tasks = [
            asyncio.create_task(self.consumer.run(), name="dev-consumer"),
            asyncio.create_task(self.scheduler.run(self._stop), name="dev-scheduler"),
        ]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ready_within
        while not (self.consumer.started.is_set() and self.scheduler.started):
            for task in self._tasks:
                if task.done():
                    error = task.exception()
                    raise DevError(f"{task.get_name()[4:]} stopped during startup: "
                                   f"{_first_line(error) if error else 'no reason given'}")
            if loop.time() > deadline:
                raise DevError(f"the consumer and scheduler were not ready within "
                               f"{ready_within:.0f}s; see the dev log")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        self._stop.set()
        if self.consumer is not None:
            self.consumer.stop()
        for task in self._tasks:
            try:
                await asyncio.wait_for(asyncio.shield(task), 30)
            except TimeoutError:
                await _cancel(task)
            except Exception:
                logging.getLogger("turnflow.dev").exception("service ended with an error")
        if self._store is not None:
            await self._store.close()


# --- options and entry point --------------------------------------------------------------------


@dataclass
class DevOptions:
    """What ``turnflow dev`` was asked for."""

    agent: str | None = None
    script: Path | None = None
    session_id: str | None = None
    data_dir: Path = Path(".turnflow")
    reply_timeout: float | None = None  # None: from the model's timeout (``turn_wait_s``)
    out: TextIO = field(default_factory=lambda: sys.stdout)
    interactive: bool = field(default_factory=lambda: sys.stdin.isatty())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``turnflow dev`` (shared by ``consumer.cli`` and ``python -m``)."""
    parser.add_argument(
        "--agent", metavar="MODULE:ATTR",
        help=f"the agent to chat with (default: AGENT, else {DEFAULT_AGENT})",
    )
    parser.add_argument(
        "--script", metavar="FILE", type=Path,
        help="feed the lines of FILE instead of a terminal, then exit (/wait N waits N seconds)",
    )
    parser.add_argument(
        "--session", metavar="ID", type=_session_id,
        help="session id (default: a new one); every run starts with empty servers, so an id "
        "from an earlier run starts a new conversation under that id (with DATABASE_URL set, "
        "the same id carries on the conversation it names there)",
    )
    parser.add_argument(
        "--data-dir", metavar="DIR", type=Path, default=Path(".turnflow"),
        help="where the embedded PostgreSQL keeps its data and the log goes (default .turnflow)",
    )


def _session_id(value: str) -> str:
    """A session id the consumer's parser takes: it refuses a blank or overlong one, so every
    input of the chat would be dropped and wait out its timeout; refused here instead."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be blank")
    if len(value) > MAX_SESSION_ID_CHARS:
        raise argparse.ArgumentTypeError(f"longer than {MAX_SESSION_ID_CHARS} characters")
    return value


def options_from(args: argparse.Namespace) -> DevOptions:
    return DevOptions(
        agent=args.agent, script=args.script, session_id=args.session, data_dir=args.data_dir
    )


def run(args: argparse.Namespace) -> int:
    """``turnflow dev`` (the entry ``consumer.cli`` calls)."""
    return main(options_from(args))


def main(options: DevOptions) -> int:
    """Run ``turnflow dev``; a startup failure prints one line to stderr and returns 1."""
    try:
        return asyncio.run(_stopped_by_signals(run_dev(options)))
    except DevError as exc:
        print(f"turnflow dev: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        # Ctrl-C is how a chat is left: not a failure (``make run`` would report "Error 130").
        print("\nturnflow dev: stopped.", file=sys.stderr, flush=True)
        return 0


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""Signals that end a chat as Ctrl-C does (``kill``, a closed terminal, a process manager):
everything this run started stops in order, its embedded PostgreSQL included."""


async def _stopped_by_signals(running: Coroutine[Any, Any, int]) -> int:
    """Run ``running``; a stop signal cancels it, so its exit stack stops the servers it
    started instead of the process dying with them still running. Exit code 0, as Ctrl-C."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(running)
    received: list[signal.Signals] = []

    def stop(sig: signal.Signals) -> None:
        if not received:
            received.append(sig)
            task.cancel()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop, sig)
    try:
        return await task
    except asyncio.CancelledError:
        if not received or not task.cancelled():
            raise
        print(f"\nturnflow dev: stopped ({received[0].name}).", file=sys.stderr, flush=True)
        return 0
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


async def run_dev(options: DevOptions) -> int:
    """Start everything, chat, stop everything; 0 when every input got its turn and replies."""
    settings = load_settings()
    agent_path = options.agent or settings.agent or DEFAULT_AGENT
    agent = load_dev_agent(agent_path)
    lines = _read_script(options.script) if options.script is not None else None
    settings = dev_metrics(settings)
    metrics_port = settings.metrics_port_for("consume")
    if metrics_port:
        check_port_free(settings.metrics_host, metrics_port, "METRICS_PORT")
    if lines is None and not options.interactive:
        lines = sys.stdin.read().splitlines()  # piped in: the same as --script
    options.data_dir.mkdir(parents=True, exist_ok=True)
    _log_to_file(options.data_dir / "dev.log", settings.log_level)
    out = options.out

    def status(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    status("turnflow dev")
    status(f"  agent     {agent_path} ({getattr(agent, 'name', '?')})")
    status(f"  model     {describe_provider(_provider_of(agent))}")
    if options.reply_timeout is None:
        options.reply_timeout = turn_wait_s(agent)
    own_database, own_broker = settings.database_url, settings.kafka_bootstrap_servers
    async with contextlib.AsyncExitStack() as stack:
        database_url = await _database(settings, options.data_dir, stack, status)
        bootstrap = await _broker(settings, stack, status)
        # Its own consumer group, so a dev run pointed at a shared broker never takes
        # partitions from a real consumer.
        updates: dict[str, Any] = {
            "database_url": database_url,
            "kafka_bootstrap_servers": bootstrap,
            "group_id": f"{settings.group_id}-dev",
        }
        if not own_broker:
            updates["kafka_idempotent_producer"] = False  # the embedded broker has no producer ids
            # It answers an empty fetch only when the wait runs out, not when a record arrives.
            updates["kafka_fetch_max_wait_ms"] = 10
        settings = settings.model_copy(update=updates)
        await _migrate(database_url)
        if own_database and not own_broker:
            # The embedded broker numbers offsets from 0 each run, and the turn log knows a
            # record by topic, partition and offset: this run's topics get their own names, so
            # a database that outlives the run takes recording after recording.
            settings = settings.model_copy(update=run_topics(settings, _new_run_id()))
            status(f"  topics    {settings.inbound_topic} (named for this run)")
        await _create_topics(settings)
        session_id = options.session_id or _new_session_id()
        chat = await _open_chat(settings, session_id, getattr(agent, "name", "agent"), options,
                                stack)
        chat.max_record_bytes = settings.max_record_bytes
        if isinstance(agent, Agent):  # the turn log keeps what `turnflow replay` needs
            agent = recorded_agent(agent)
        services = DevServices(settings, ObservedAgent(agent, chat.observe, chat.failed))
        await services.start()
        stack.push_async_callback(services.stop)
        display = asyncio.create_task(chat.display(), name="dev-display")
        stack.push_async_callback(_cancel, display)
        if metrics_port:
            shown = settings.metrics_host if settings.metrics_host not in ("0.0.0.0", "") else (
                "127.0.0.1")
            status(f"  metrics   http://{shown}:{metrics_port}/metrics")
        status(f"  session   {session_id}   (logs: {options.data_dir / 'dev.log'})")
        status(HELP if lines is None else f"Running {options.script or 'standard input'}.")
        if lines is None:
            terminal = TerminalLines(history=options.data_dir / "chat_history")
            chat.prompt = terminal
            with terminal.editing():
                await _until_interrupted(chat.run(_noting_cuts(aiter(terminal), chat)))
        else:
            await chat.run(_from_list(lines))
    return 1 if chat.missing else 0


async def _until_interrupted(chatting: Any) -> None:
    """Run the chat until it ends or Ctrl-C. SIGINT is taken here rather than as a
    KeyboardInterrupt, so that it ends the chat wherever it lands (waiting for a reply, at the
    prompt) and the servers still stop in order."""
    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    chat_task = asyncio.ensure_future(chatting)
    loop.add_signal_handler(signal.SIGINT, interrupted.set)
    waiter = asyncio.ensure_future(interrupted.wait())
    try:
        await asyncio.wait({chat_task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        waiter.cancel()
        if not chat_task.done():
            chat_task.cancel()
            await asyncio.wait({chat_task}, timeout=5)
    if interrupted.is_set():
        print("\nturnflow dev: stopped.", file=sys.stderr, flush=True)
    elif (error := chat_task.exception()) is not None:
        raise error


async def _from_list(lines: Iterable[str]) -> AsyncIterator[str]:
    for line in lines:
        yield line


TTY_LINE_MAX = 4095
"""The longest line a terminal in its plain (canonical) mode hands over; the kernel drops the
rest. With ``readline`` the terminal is not in that mode and no line is cut."""


async def _noting_cuts(lines: AsyncIterator[str], chat: Chat) -> AsyncIterator[str]:
    """Pass the typed lines on, saying when the terminal cut one."""
    async for chunk in lines:
        for line in chunk.split("\n"):
            if not _READLINE and len(line) >= TTY_LINE_MAX:
                chat.say(f"  [the terminal cut this line at {TTY_LINE_MAX} characters; "
                         "only those were sent]")
        yield chunk


try:  # line editing and history for input(); absent on some builds, and then the plain line
    import readline as _readline_module

    _READLINE: Any = _readline_module
except ImportError:  # pragma: no cover - CPython on Linux and macOS ships it
    _READLINE = None


PASTE_GAP_S = 0.05
"""Lines that reach the terminal closer together than this were pasted, not typed."""


class TerminalLines:
    """Lines typed at the terminal, read by a daemon thread so that timers keep printing while
    the user types, and Ctrl-C never waits for a blocked ``input()``. ``readline`` gives the
    arrow keys, editing and a history kept in ``history`` between runs."""

    PROMPT = "you> "

    def __init__(self, history: Path | None = None) -> None:
        self.at_prompt = False
        self._history = history
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()

    @contextlib.contextmanager
    def editing(self) -> Any:
        """Load the history, and on the way out save it and give the terminal back as it was
        (Ctrl-C may land while ``readline`` has it in its own mode)."""
        saved = _terminal_state()
        if _READLINE is not None and self._history is not None:
            with contextlib.suppress(OSError):
                _READLINE.read_history_file(str(self._history))
            _READLINE.set_history_length(1000)
        try:
            yield self
        finally:
            if _READLINE is not None and self._history is not None:
                with contextlib.suppress(OSError):
                    _READLINE.write_history_file(str(self._history))
            _restore_terminal(saved)

    def __aiter__(self) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._read, args=(loop,), name="dev-stdin", daemon=True).start()
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        """Each typed line; lines that come in together (pasted) as one chunk, one per line,
        which the chat sends as a burst."""
        while (line := await self._queue.get()) is not None:
            chunk = [line]
            ended = False
            while True:
                try:
                    more = await asyncio.wait_for(self._queue.get(), PASTE_GAP_S)
                except TimeoutError:
                    break
                if more is None:
                    ended = True
                    break
                chunk.append(more)
            yield "\n".join(chunk)
            if ended:
                return

    def _read(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            self.at_prompt = True
            try:
                line: str | None = input(self.PROMPT)
            except (EOFError, KeyboardInterrupt):
                line = None
            self.at_prompt = False
            loop.call_soon_threadsafe(self._queue.put_nowait, line)
            if line is None or line.strip() in ("/quit", "/exit"):
                return


def _terminal_state() -> Any:
    try:
        import termios

        return termios.tcgetattr(sys.stdin.fileno())
    except (ImportError, OSError, ValueError):
        return None


def _restore_terminal(state: Any) -> None:
    if state is None:
        return
    import termios

    with contextlib.suppress(OSError, ValueError):
        termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, state)


def _read_script(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DevError(f"cannot read script {path}: {exc.strerror or exc}") from None


def _new_session_id() -> str:
    return f"dev-{uuid.uuid4().hex[:8]}"


# --- startup, each failure one line -------------------------------------------------------------


def load_settings() -> Settings:
    """The settings from the environment; a bad value names its variable."""
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        variable = str(first["loc"][0]).upper() if first.get("loc") else "?"
        # An unreadable KAFKA_SASL_PASSWORD_FILE is one of these too, named as that variable.
        raise DevError(f"environment variable {variable} is invalid: {first['msg']}") from None


def load_dev_agent(path: str) -> Any:
    """Import the agent, with the working directory importable as uvicorn and pytest do.

    A module that reads an unset environment variable at import (``os.environ["X"]``) is reported
    as that missing variable; a configuration error keeps the engine's message, which names the
    flow and the step.
    """
    try:
        return load_agent(path)  # the working directory is importable (load_agent adds it)
    except AgentImportError as exc:
        cause = exc.__cause__
        # Only a plain KeyError is os.environ[...]: a subclass (an unknown time zone is one) is not.
        if type(cause) is KeyError and cause.args and str(cause.args[0]) not in os.environ:
            raise DevError(
                f"agent {path} needs the environment variable {cause.args[0]}, which is not set"
            ) from None
        if isinstance(cause, FlowConfigurationError):
            raise DevError(f"agent {path} is invalid: {cause}") from None
        raise DevError(f"agent {path}: {exc}") from None


def check_port_free(host: str, port: int, setting: str) -> None:
    """Refuse early, in one line, when another process holds a port this process must bind."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            raise DevError(
                f"port {port} is in use ({setting}); stop the process using it "
                f"or set {setting} to another port ({setting}=0 turns it off)"
            ) from None


def dev_metrics(settings: Settings) -> Settings:
    """The dev chat's metrics port: ``METRICS_PORT`` when set, else a free port the kernel picks
    (a node exporter or another turnflow on the default port must not stop a chat), bound to
    127.0.0.1 unless ``METRICS_HOST`` says otherwise: a developer's machine does not publish
    its metrics to the network."""
    updates: dict[str, Any] = {}
    if "metrics_host" not in settings.model_fields_set:
        updates["metrics_host"] = "127.0.0.1"
    if settings.metrics_port is None:
        updates["metrics_port"] = free_port(updates.get("metrics_host", settings.metrics_host))
    return settings.model_copy(update=updates) if updates else settings


def _provider_of(agent: Any) -> Any:
    config = getattr(agent, "config", None)
    return getattr(config, "provider", None) or getattr(agent, "provider", None)


MIN_TURN_WAIT_S = 60.0
TURN_WAIT_MARGIN_S = 30.0


def turn_wait_s(agent: Any) -> float:
    """How long the chat waits for one input's turn and replies: every model call the turn may
    make at the provider's own timeout (understand, a history summary, speak, and one more per
    tool round when the agent has tools), plus a margin for the broker and the store; never
    under 60 s. A fixed wait would print a slow model's replies against the next input."""
    timeout = getattr(_provider_of(agent), "timeout", None)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
        return MIN_TURN_WAIT_S
    config = getattr(agent, "config", None)
    tool_rounds = int(getattr(config, "max_tool_loops", 0) or 0) if getattr(
        config, "tools", None) else 0
    calls = 3 + tool_rounds
    return max(MIN_TURN_WAIT_S, calls * float(timeout) + TURN_WAIT_MARGIN_S)


def describe_provider(provider: Any) -> str:
    """One safe line naming the model provider (providers describe themselves, never the key)."""
    if provider is None:
        return "none configured"
    description = getattr(provider, "description", None)
    return str(description) if description else type(provider).__name__


def _log_to_file(path: Path, level: str) -> None:
    """The service's JSON logs go to a file so the chat stays readable."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())


def _host_port(url: str) -> str:
    parsed = urlsplit(url)
    return f"{parsed.hostname or '?'}:{parsed.port or 5432}"


async def _database(
    settings: Settings, data_dir: Path, stack: contextlib.AsyncExitStack,
    status: Callable[[str], None],
) -> str:
    if settings.database_url:
        await _probe_database(settings.database_url)
        status(f"  postgres  {_host_port(settings.database_url)} (DATABASE_URL)")
        return settings.database_url
    server = EmbeddedPostgres(data_dir / "postgres")
    reused = _server_running(data_dir / "postgres")
    starting = asyncio.ensure_future(asyncio.to_thread(server.start))
    if not reused:  # a server another dev run started is left to it
        # Registered before it starts: a stop signal during the start still stops it, once
        # the start (a thread, which a cancel does not end) is over.
        stack.push_async_callback(_stop_once_started, server, starting)
    try:
        url = await asyncio.shield(starting)
    except EmbeddedServerError as exc:
        raise DevError(f"the embedded PostgreSQL did not start: {_first_line(exc)}") from None
    # A fresh database per run: the embedded broker starts empty, so a turn log kept from an
    # earlier run would take the new run's offsets for replays and skip them.
    database = await _fresh_database(url)
    stack.push_async_callback(_drop_database, url, database)
    status(f"  postgres  embedded at {_host_port(url)}, database {database}: new for this run "
           "(every run starts a fresh conversation; nothing from earlier runs is kept)")
    return make_url(url).set(database=database).render_as_string(hide_password=False)


async def _stop_once_started(server: EmbeddedPostgres, starting: asyncio.Future[str]) -> None:
    with contextlib.suppress(Exception):
        await starting
    if not starting.cancelled() and starting.exception() is None:
        await asyncio.to_thread(server.stop)


async def _fresh_database(admin_url: str) -> str:
    """Create this run's database; drop those of earlier runs that nobody is connected to."""
    import asyncpg

    name = f"turnflow_dev_{uuid.uuid4().hex[:8]}"
    connection = await asyncpg.connect(plain_url(admin_url), timeout=10)
    try:
        leftovers = await connection.fetch(
            "SELECT datname FROM pg_database WHERE datname LIKE 'turnflow\\_dev\\_%' "
            "AND datname NOT IN (SELECT datname FROM pg_stat_activity WHERE datname IS NOT NULL)"
        )
        for row in leftovers:
            with contextlib.suppress(asyncpg.PostgresError):
                await connection.execute(f'DROP DATABASE IF EXISTS "{row["datname"]}"')
        await connection.execute(f'CREATE DATABASE "{name}"')  # name is ours: hex only
    finally:
        await connection.close()
    return name


async def _drop_database(admin_url: str, name: str) -> None:
    import asyncpg

    with contextlib.suppress(OSError, asyncpg.PostgresError):
        connection = await asyncpg.connect(plain_url(admin_url), timeout=10)
        try:
            await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await connection.close()


def _server_running(data_dir: Path) -> bool:
    """Whether a PostgreSQL already runs on this data directory (its pid file names a live pid)."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().splitlines()[0])
        os.kill(pid, 0)
    except PermissionError:  # alive, owned by the server's own user
        return True
    except (OSError, ValueError, IndexError):
        return False
    return True


async def _probe_database(url: str) -> None:
    import asyncpg

    try:
        connection = await asyncpg.connect(plain_url(url), timeout=10)
    except (OSError, TimeoutError, asyncpg.PostgresError, ValueError) as exc:
        reason = _first_line(exc) or type(exc).__name__
        raise DevError(
            f"cannot reach PostgreSQL at {_host_port(url)} (DATABASE_URL): {reason}"
        ) from None
    await connection.close()


async def _broker(
    settings: Settings, stack: contextlib.AsyncExitStack, status: Callable[[str], None]
) -> str:
    if settings.kafka_bootstrap_servers:
        await _probe_broker(settings)
        status(f"  broker    {settings.kafka_bootstrap_servers} (KAFKA_BOOTSTRAP_SERVERS)")
        return settings.kafka_bootstrap_servers
    broker = EmbeddedBroker()
    try:
        await asyncio.to_thread(broker.start)
    except EmbeddedBrokerError as exc:
        raise DevError(f"the embedded broker did not start: {_first_line(exc)}") from None
    stack.callback(broker.stop)
    status(f"  broker    embedded at {broker.bootstrap_servers} (in memory)")
    return broker.bootstrap_servers


async def _probe_broker(settings: Settings) -> None:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaConnectionError, KafkaError

    servers = settings.kafka_bootstrap_servers or ""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=servers, request_timeout_ms=10000, **settings.kafka_client_options()
    )
    try:
        await asyncio.wait_for(admin.start(), 15)
    except (KafkaConnectionError, TimeoutError):
        raise DevError(
            f"cannot reach the Kafka broker at {servers} (KAFKA_BOOTSTRAP_SERVERS): "
            "no broker answered"
        ) from None
    except (KafkaError, OSError) as exc:
        reason = _first_line(exc)
        raise DevError(
            f"cannot reach the Kafka broker at {servers} (KAFKA_BOOTSTRAP_SERVERS): {reason}"
        ) from None
    finally:
        with contextlib.suppress(Exception):
            await admin.close()


def run_topics(settings: Settings, run_id: str) -> dict[str, str]:
    """Topic names for one run against the embedded broker: each configured name with the run
    id after it, so no record of this run is taken for an earlier run's in the turn log."""
    return {
        name: f"{getattr(settings, name)}.{run_id}"
        for name in ("inbound_topic", "messages_topic", "schedule_topic", "dlq_topic")
    }


def _new_run_id() -> str:
    return f"run-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


async def _migrate(url: str) -> None:
    try:
        await upgrade_async(url)
    except Exception as exc:
        raise DevError(f"migrating the database failed: {_first_line(exc)}") from None


async def _create_topics(settings: Settings) -> None:
    topics = [
        TopicSpec(name, partitions=1)
        for name in (settings.inbound_topic, settings.messages_topic, settings.schedule_topic,
                     settings.dlq_topic)
    ]
    try:
        await ensure_topics(
            settings.kafka_bootstrap_servers or "", topics,
            client_options=settings.kafka_client_options(),
        )
    except ConsumerError as exc:
        raise DevError(f"creating topics failed: {_first_line(exc)}") from None


async def _open_chat(
    settings: Settings, session_id: str, agent_name: str, options: DevOptions,
    stack: contextlib.AsyncExitStack,
) -> Chat:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    client = settings.kafka_client_options()
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap_servers, acks="all", **client
    )
    await producer.start()
    stack.push_async_callback(producer.stop)
    replies = ReplyReader(
        AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap_servers,
                         enable_auto_commit=False,
                         fetch_max_wait_ms=settings.kafka_fetch_max_wait_ms, **client),
        settings.messages_topic,
        session_id,
    )
    await replies.start()
    stack.push_async_callback(replies.stop)
    chat = Chat(
        session_id=session_id,
        agent_name=str(agent_name).lower(),
        producer=producer,
        inbound_topic=settings.inbound_topic,
        replies=replies,
        out=options.out,
        reply_timeout=options.reply_timeout or MIN_TURN_WAIT_S,
        echo=options.script is not None or not options.interactive,
    )
    chat.log_path = options.data_dir / "dev.log"
    letters = DeadLetterReader(
        AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap_servers,
                         enable_auto_commit=False,
                         fetch_max_wait_ms=settings.kafka_fetch_max_wait_ms, **client),
        settings.dlq_topic,
        chat.dead_lettered,
    )
    await letters.start()
    stack.push_async_callback(letters.stop)
    return chat


async def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="turnflow dev", description=__doc__.splitlines()[0])
    add_arguments(_parser)
    sys.exit(run(_parser.parse_args()))
