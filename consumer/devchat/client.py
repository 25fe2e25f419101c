"""The chat client: a conversation with the agent through the real topics.

An input is produced to ``inbound.turns`` as a channel adapter would write it; replies are read
back from ``outbound.messages`` as a delivery worker would read them (``ReplyReader``), and the
DLQ topic from its end (``DeadLetterReader``), so an input the consumer dead-letters is known at
once. The consumer's agent is wrapped in ``ObservedAgent``, which hands each turn's request and
result (outcomes, ``llm_calls``, ``link_fixes``) to the chat: what the topics do not carry.

``consumer.devchat.terminal.Chat`` is the terminal's view of it (``turnflow dev``); the inspector's
test console (``consumer.inspect.console``) is another view of the same pieces.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from consumer.topics import partitions_of

if TYPE_CHECKING:
    from consumer.settings import Settings

__all__ = [
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
    "reader_consumer",
    "start_producer",
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


async def start_producer(settings: Settings, client: dict[str, Any],
                         stack: contextlib.AsyncExitStack) -> Any:
    """A producer to the broker ``settings`` names (``acks="all"``, as an adapter writes),
    started and stopped by ``stack``; ``client`` is ``settings.kafka_client_options()``."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers, acks="all",
                                **client)
    await producer.start()
    stack.push_async_callback(producer.stop)
    return producer


def reader_consumer(settings: Settings, client: dict[str, Any]) -> Any:
    """The consumer a ``ReplyReader`` or ``DeadLetterReader`` reads through: it commits nothing
    and fetches waiting as long as the service's consumer does."""
    from aiokafka import AIOKafkaConsumer

    return AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap_servers,
                            enable_auto_commit=False,
                            fetch_max_wait_ms=settings.kafka_fetch_max_wait_ms, **client)


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
