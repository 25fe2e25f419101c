"""Sending a refused input to the DLQ topic, in a form that always fits.

A dead letter is the original record (key, value, the producer's headers) plus the consumer's
own headers: ``error`` (the reason code), ``detail`` (what was wrong, naming fields, never the
content), ``source-topic``/``source-partition``/``source-offset``. The consumer's headers come
first and are the only ones under those names: a producer's own ``error`` or ``detail`` (or any
other name the consumer sets) is kept as ``original-<name>``, so no record can forge the reason
a reader sees first.

A record close to the broker's size limit cannot travel whole once these headers are added,
and retrying would hold its partition forever. When the broker or the producer refuses the
dead letter for a reason no retry can fix (``consumer.failures``: too large, or a producer's
header that cannot be encoded again), the record is kept in full
in the ``dead_letters`` table and the dead letter goes out with an empty value, the consumer's
headers and two more: ``kept-in`` (``dead_letters``) and ``kept-id`` (the row id); the
producer's headers stay in the table with the rest. Nothing is lost and the partition moves on.

A record the parser refused is sent once (``RefusedRecords``): its source is stored as
dead-lettered after the send, and a reread of the partition (a restart with a new group id,
lost offsets, a crash before the commit) looks it up before sending it again. The lookups and
sends of one partition's refused records run one at a time, in offset order, so the DLQ keeps
the partition's order; a record past the partition's highest dead-lettered offset (every
record, unless the partition is being reread) needs no lookup at all.

While tracing is on, a dead letter carries the context (``traceparent``/``tracestate``) of the
span that sent it, the failed turn's, among the consumer's headers; the producer's own trace
headers are then kept as ``original-traceparent``/``original-tracestate``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Protocol

from aiokafka.structs import ConsumerRecord, TopicPartition

from consumer import tracing
from consumer.failures import cannot_succeed, describe
from store import DeadLetterRecord, SourceRecord

__all__ = [
    "KEPT_IN",
    "DeadLetterPublisher",
    "DeadLetterStore",
    "RefusedRecords",
    "dead_letter_headers",
    "keep_unsendable",
]

KEPT_IN = "dead_letters"

# Header names the consumer writes; a producer's headers under these names are renamed.
_OWN_HEADERS = frozenset(
    {"error", "detail", "source-topic", "source-partition", "source-offset", "kept-in",
     "kept-id"}
)
# A key longer than this is not repeated on a kept record's dead letter (it is in the table).
_MAX_FORWARDED_KEY = 1024

Headers = list[tuple[str, bytes]]


class DeadLetterStore(Protocol):
    """Where records that cannot travel whole are kept: ``store.Store``."""

    async def keep_dead_letter(self, letter: DeadLetterRecord) -> int: ...


class Producer(Protocol):
    """What is needed of ``AIOKafkaProducer``."""

    async def send_and_wait(
        self, topic: str, value: bytes | None = None, key: bytes | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> object: ...


def dead_letter_headers(
    record: ConsumerRecord[bytes, bytes], reason: str, detail: str, trace: Headers | None = None
) -> tuple[Headers, Headers]:
    """The consumer's headers for ``record``, and the producer's with clashing names renamed.
    ``trace`` (the current span's ``traceparent``/``tracestate``, while tracing is on) joins
    the consumer's: the producer's own trace headers (any case) are then kept as
    ``original-<name>``."""
    own: Headers = [
        ("error", reason.encode()),
        ("detail", detail.encode("utf-8", "backslashreplace")),
        ("source-topic", record.topic.encode()),
        ("source-partition", str(record.partition).encode()),
        ("source-offset", str(record.offset).encode()),
    ]
    # With the span's context, every trace header of the producer's is renamed: its
    # ``tracestate`` must not pass for the state of the span's ``traceparent``.
    traced = frozenset(tracing.TRACE_HEADERS) if trace else frozenset()
    own.extend(trace or ())
    theirs: Headers = [
        (f"original-{name}" if name in _OWN_HEADERS or _lower(name) in traced else name, value)
        for name, value in (record.headers or ())
    ]
    return own, theirs


def _lower(name: object) -> object:
    """A header name as trace headers are matched (case-insensitively, as W3C readers do)."""
    return name.lower() if isinstance(name, str) else name


class DeadLetterPublisher:
    """Publishes dead letters to ``topic``; see the module docstring."""

    def __init__(self, producer: Producer, store: DeadLetterStore, topic: str) -> None:
        self._producer = producer
        self._store = store
        self._topic = topic

    async def publish(
        self, record: ConsumerRecord[bytes, bytes], reason: str, detail: str
    ) -> int | None:
        """Send ``record``'s dead letter; the ``dead_letters`` row id when it was kept there
        because it cannot travel whole, else None. Broker and database errors propagate (the
        caller retries them: the record is released only once its dead letter is out)."""
        trace = tracing.send_options().get("headers")
        own, theirs = dead_letter_headers(record, reason, detail, trace)
        try:
            await self._producer.send_and_wait(
                self._topic, record.value, key=record.key, headers=[*own, *theirs]
            )
            return None
        except Exception as exc:
            # Too large, or a producer header name that cannot be encoded: the same record
            # would fail the same way on every attempt.
            if cannot_succeed(exc) is None:
                raise
        row_id = await self._store.keep_dead_letter(
            DeadLetterRecord(
                source=f"{record.topic}:{record.partition}:{record.offset}",
                topic=self._topic,
                reason=reason,
                detail=detail,
                key=record.key,
                value=record.value,
                headers=list(record.headers or ()),
            )
        )
        key = record.key
        if key is not None and len(key) > _MAX_FORWARDED_KEY:
            key = None
        await self._producer.send_and_wait(
            self._topic,
            b"",
            key=key,
            headers=[*own, ("kept-in", KEPT_IN.encode()), ("kept-id", str(row_id).encode())],
        )
        return row_id


async def keep_unsendable(
    store: DeadLetterStore,
    *,
    source: str,
    topic: str,
    error: BaseException,
    key: str | None,
    value: bytes,
) -> tuple[str, int]:
    """Keep something the broker can never take (an outbox row, a timer's wake) in the
    ``dead_letters`` table, under the reason ``consumer.failures`` gives ``error``; the reason
    and the row id."""
    reason = cannot_succeed(error) or "invalid-data"
    kept = await store.keep_dead_letter(
        DeadLetterRecord(
            source=source,
            topic=topic,
            reason=reason,
            detail=describe(error),
            key=None if key is None else key.encode("utf-8", "backslashreplace"),
            value=value,
        )
    )
    return reason, kept


class DeadLetteredSources(Protocol):
    """Where dead-lettered sources are looked up: ``store.Store``."""

    async def last_dead_lettered_offset(self, topic: str, partition: int) -> int | None: ...

    async def is_dead_lettered(self, source: SourceRecord) -> bool: ...


class RefusedRecords:
    """Per partition: a lane that runs refused records one at a time in offset order, and
    whether a refused record's source is known as already dead-lettered."""

    def __init__(self) -> None:
        self._lanes: dict[TopicPartition, asyncio.Lock] = {}
        self._highest: dict[TopicPartition, int] = {}

    def lane(self, tp: TopicPartition) -> asyncio.Lock:
        """Held around one refused record's lookup and send. ``asyncio.Lock`` wakes waiters
        first come first served, and each record's task asks for the lane before any other
        await, so the records of a partition pass in the order they were fetched."""
        return self._lanes.setdefault(tp, asyncio.Lock())

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """A new assignment: the highest dead-lettered offset is read again (another consumer
        may have dead-lettered records of the partition meanwhile)."""
        for tp in partitions:
            self._highest.pop(tp, None)

    async def sent_before(self, store: DeadLetteredSources, tp: TopicPartition,
                          offset: int) -> bool:
        """Whether the record at ``offset`` was dead-lettered before (and stored as such)."""
        highest = self._highest.get(tp)
        if highest is None:
            last = await store.last_dead_lettered_offset(tp.topic, tp.partition)
            highest = self._highest[tp] = -1 if last is None else last
        if offset > highest:
            return False
        return await store.is_dead_lettered(SourceRecord(tp.topic, tp.partition, offset))

    def sent(self, tp: TopicPartition, offset: int) -> None:
        """The record at ``offset`` was dead-lettered: a refetch of it within this assignment
        looks it up instead of trusting the cached highest offset."""
        if tp in self._highest:
            self._highest[tp] = max(self._highest[tp], offset)
