"""Publishing outbox rows to Kafka, and the relay that republishes rows a crash left behind.

Rows are fetched through ``store.fetch_unpublished``, which locks them ``FOR UPDATE SKIP
LOCKED`` and returns, per session, only a prefix of that session's unpublished rows: so any
publisher — the consumer right after its save, another replica's relay, this one — sends a
session's rows oldest first and no two publishers hold the same row. The rows are sent in id
order on one idempotent producer (acks=all), all acks awaited, then marked published in the
same transaction that locked them. When some acks fail for a reason a retry may fix, the rows
the broker did take are marked all the same, per session up to that session's first failed
row (its later rows stay unpublished even if acknowledged, so they go out again after it, in
order); the marks commit, then ``PublishError`` is raised and the failed rows wait for the next
attempt. One bad partition so holds back only its own sessions: the relay's batch mixes many
sessions, and were it all rolled back, every other session's rows would be sent again on every
pass and never marked.

A turn's own rows take a shorter path when its load found none of the session's rows
unpublished: ``publish_saved`` sends them straight from the save's ids and payloads, awaits every
ack and marks them in one statement, with no fetch and no transaction held across the sends.
No older row can be waiting (every write of a session's rows bumps its version, and the save
checked the version the load read), and the relay leaves rows this young alone; if a send
outlives its grace period the relay may send the same rows again, under the same keys. Marks
of turns that finish together share one statement (``PublishedMarks``, a group commit): each
turn still waits for its own rows' mark before its offset is released.

A row the broker can never take (``consumer.failures`` classes the error: a reply over the
size limit, a payload that cannot be encoded) would fail on every pass and hold its session's
later rows, and in the relay every session's, for good. Such a row is set aside instead: kept
in full in the ``dead_letters`` table (source ``outbox:<id>``), logged with its reason, and
marked published with the rest of its batch, so the rows behind it go out in order.

A consumer that lost its partition must not publish (its replies could land after the new
owner's): ``flush_session`` and ``publish_saved`` take a ``may_publish`` check and raise
``FencedPublishError`` instead of sending. The relay is not tied to partitions; it only touches
rows older than its grace period, which normally were left by a crash. Their age is judged in
the fetch, by the database clock that stamped them, so the relay never locks a young row (whose
writer is about to mark it, and would wait for the relay's sends) and a host clock running
ahead or behind the database's cannot make it take rows early or late.

With tracing on, each row is stored with the trace context of the turn that wrote it
(``outbox.traceparent``/``tracestate``) and a fetched row is sent with that context, whoever
sends it: the relay after a crash, or a later turn of the session flushing its elders. A turn's
own just-saved rows carry the context of the turn in progress, which is the same one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer
from aiokafka.errors import BrokerResponseError, KafkaError

from consumer import metrics, tracing
from consumer.dead_letters import keep_unsendable
from consumer.errors import FencedPublishError, ProducerIdError, PublishError
from consumer.failures import cannot_succeed
from consumer.groups import Grouped
from consumer.partitioner import CachedPartitioner
from store import OutboxEntry, OutboxRow, Store, jsoncodec

__all__ = [
    "OutboundRecord",
    "OutboxPublisher",
    "PublishedMarks",
    "encode_payload",
    "new_producer",
    "start_producer",
]

log = logging.getLogger("turnflow.outbox")


async def start_producer(producer: AIOKafkaProducer, *, idempotent: bool) -> None:
    """Start ``producer``. An idempotent producer first asks the broker for a producer id; a
    broker that has none to give (the embedded one) answers with an error aiokafka reports as
    ``UnknownError``, so that answer becomes ``ProducerIdError`` saying what to set."""
    try:
        await producer.start()
    except BrokerResponseError as exc:
        if not idempotent:
            raise
        raise ProducerIdError(
            f"the broker refused a producer id ({type(exc).__name__}), which the idempotent "
            "producer needs; set KAFKA_IDEMPOTENT_PRODUCER=false for a broker without producer "
            "ids, such as the embedded one"
        ) from None


def new_producer(
    bootstrap_servers: str, *, idempotent: bool = True, **client_options: Any
) -> AIOKafkaProducer:
    """The producer every publisher uses: all in-sync replicas ack, idempotent, ordered, keys
    partitioned as every Kafka client partitions them (``CachedPartitioner``).

    ``idempotent=False`` is for brokers without producer ids (the embedded one); aiokafka keeps
    one request in flight per partition either way, so order holds, and a retried send may
    duplicate a record, which consumers dedupe by its ``key``.
    """
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers,
        acks="all",
        enable_idempotence=idempotent,
        linger_ms=2,
        partitioner=CachedPartitioner(),
        **client_options,
    )


def encode_payload(payload: dict[str, Any]) -> bytes:
    """The wire form of an outbound value: compact UTF-8 JSON, encoded as the store writes the
    row, so a row sent straight after its save and the same row sent again from the table (a
    relay, a replay) carry the same content."""
    return jsoncodec.dumps(payload).encode("utf-8")


def _always() -> bool:
    return True


_UNSTORED = object()
"""What a just-saved ``OutboxEntry`` has for a stored trace context: the current one applies."""


class OutboundRecord(Protocol):
    """What ``send`` needs of a row: a fetched ``OutboxRow`` or a just-saved ``OutboxEntry``."""

    @property
    def topic(self) -> str: ...

    @property
    def key(self) -> str | None: ...

    @property
    def payload(self) -> dict[str, Any]: ...


class PublishedMarks:
    """Marks rows published for many turns at once: one statement in flight at a time, and
    everything that arrives meanwhile goes in the next one (``consumer.groups.Grouped``), so
    under load a mark costs a fraction of a round trip and when idle it goes out at once."""

    def __init__(self, store: Store) -> None:
        async def mark_all(groups: list[Sequence[int]]) -> list[None]:
            await store.mark_published([row_id for ids in groups for row_id in ids])
            return [None] * len(groups)

        self._group: Grouped[Sequence[int], None] = Grouped(
            mark_all, max_group=None, name="outbox-marks"
        )

    async def mark(self, ids: Sequence[int]) -> None:
        """Return once ``ids`` are marked published; raise what the statement raised."""
        await self._group.submit(ids)

    async def close(self) -> None:
        """Cancel the statement in flight, if any (``Grouped.close``); the rows it was marking
        stay unpublished, and the relay sends them again."""
        await self._group.close()


class OutboxPublisher:
    """Sends unpublished outbox rows and marks them published."""

    def __init__(self, store: Store, producer: AIOKafkaProducer, *, batch_limit: int = 100):
        self._store = store
        self._producer = producer
        self._batch_limit = batch_limit
        self._marks = PublishedMarks(store)

    async def close(self) -> None:
        """Cancel the grouped mark in flight, if any: for shutdown, before the store closes."""
        await self._marks.close()

    async def flush_session(
        self, session_id: str, *, may_publish: Callable[[], bool] = _always
    ) -> list[int]:
        """Publish the session's unpublished rows that no one else holds; their ids in order."""
        published: list[int] = []
        while True:
            async with self._store.fetch_unpublished(
                session_id=session_id, limit=self._batch_limit
            ) as batch:
                rows = batch.rows
                if not rows:
                    return published
                if not may_publish():
                    raise FencedPublishError(
                        "partition no longer owned; leaving rows to the relay",
                        session_id=session_id,
                    )
                done, failed = await self._send_prefixes(rows)
                await batch.mark_published(done)
            # Raised once the rows sent before the failure are marked (the block committed).
            if failed is not None:
                raise failed
            published.extend(done)
            if len(rows) < self._batch_limit:
                return published

    async def publish_saved(
        self,
        session_id: str,
        ids: Sequence[int],
        entries: Sequence[OutboxEntry],
        *,
        may_publish: Callable[[], bool] = _always,
    ) -> None:
        """Publish a turn's just-saved rows (``ids`` and ``entries`` in write order) as one
        batch: send all, await every ack, then mark them all published (one statement, shared
        with the turns finishing at the same time).

        Only for a session that had no unpublished rows before this save (see the module
        docstring); otherwise ``flush_session`` keeps the older rows first.
        """
        if not entries:
            return
        if not may_publish():
            raise FencedPublishError(
                "partition no longer owned; leaving rows to the relay", session_id=session_id
            )
        await self.send(entries, ids)
        await self._marks.mark(ids)

    async def flush_older(self, *, older_than: timedelta) -> int:
        """One relay pass: publish, per session, the prefix of rows older than ``older_than``
        by the database clock (the fetch takes and locks only those; see ``store.outbox``).

        A failed ack raises ``PublishError`` after the rows acknowledged before it in their
        session are marked; returns how many were marked."""
        async with self._store.fetch_unpublished(
            limit=self._batch_limit, older_than=older_than
        ) as batch:
            if not batch.rows:
                return 0
            done, failed = await self._send_prefixes(batch.rows, resend=True)
            await batch.mark_published(done)
        if failed is not None:
            raise failed
        return len(done)

    async def send(self, rows: Sequence[OutboundRecord], ids: Sequence[int]) -> None:
        """Send rows in order and wait for every ack; ``PublishError`` when any fails for a
        reason a retry may fix, and then the caller marks none of them. A row that can never
        be sent is set aside (see the module docstring); ``ids`` are the rows' outbox ids, in
        the same order."""
        outcomes = await self._attempt(rows)
        failed = next((o for o in outcomes if _retryable(o)), None)
        if failed is not None:
            raise _publish_error(failed)
        for row_id, row, outcome in zip(ids, rows, outcomes, strict=True):
            if outcome is not None:
                await self._set_aside(row_id, row, outcome)

    async def _send_prefixes(
        self, rows: Sequence[OutboxRow], *, resend: bool = False
    ) -> tuple[list[int], PublishError | None]:
        """Send fetched rows (in id order, any sessions) and wait for every ack; return the ids
        to mark published and the first failure a retry may fix, if any.

        The ids are, per session, the rows before its first failed one, acknowledged or set
        aside: a session's later rows are sent again after the failed one, never marked
        ahead of it. A row after the failure is not set aside either, so it is kept once.
        ``resend`` (the relay's pass): each row is sent in a span of its own (tracing on)."""
        outcomes = await self._attempt(rows, resend=resend)
        done: list[int] = []
        failed: BaseException | None = None
        stopped: set[str] = set()
        for row, outcome in zip(rows, outcomes, strict=True):
            if row.session_id in stopped:
                continue
            if _retryable(outcome):
                stopped.add(row.session_id)
                if failed is None:
                    failed = outcome
                continue
            if outcome is not None:
                await self._set_aside(row.id, row, outcome)
            done.append(row.id)
        return done, None if failed is None else _publish_error(failed)

    async def _attempt(
        self, rows: Sequence[OutboundRecord], *, resend: bool = False
    ) -> list[BaseException | None]:
        """Send rows in order and await every ack: per row, None once acknowledged, else the
        error that refused it. A send the producer refuses for a reason a retry may fix stops
        the sending: that row and every later one get its error, so none goes out ahead of
        it; the acks of the rows sent before it are still awaited, so those can be marked."""
        sends: list[asyncio.Future[Any] | BaseException] = []
        spans: list[tracing.SendSpan] = []
        current = tracing.send_options()  # the current turn's trace context, if any
        for row in rows:
            # A fetched row goes out in the trace of the turn that wrote it (stored with it),
            # whoever sends it; a just-saved entry in the current turn's. The relay sends each
            # of its rows in a span of its own, a child of that stored context.
            stored = getattr(row, "traceparent", _UNSTORED)
            if stored is _UNSTORED:
                options = current
            elif resend and (span := tracing.resend_span(
                topic=row.topic, session_id=getattr(row, "session_id", row.key or ""),
                traceparent=stored, tracestate=getattr(row, "tracestate", None),
            )) is not None:
                spans.append(span)
                options = {"headers": span.headers}
            else:
                options = tracing.stored_options(stored, getattr(row, "tracestate", None))
            try:
                sends.append(
                    await self._producer.send(
                        row.topic,
                        encode_payload(row.payload),
                        key=row.key.encode("utf-8") if row.key is not None else None,
                        **options,
                    )
                )
            except Exception as exc:
                retryable = cannot_succeed(exc) is None
                if retryable and not isinstance(exc, KafkaError):
                    for span in spans:
                        span.end(exc)
                    raise
                sends.append(exc)
                if retryable:
                    sends.extend([exc] * (len(rows) - len(sends)))
                    break
        settled = iter(
            await _settled([s for s in sends if not isinstance(s, BaseException)])
        )
        outcomes: list[BaseException | None] = []
        for row, sent in zip(rows, sends, strict=True):
            outcome = sent if isinstance(sent, BaseException) else next(settled)
            if isinstance(outcome, BaseException):
                outcomes.append(outcome)
            else:
                metrics.child(metrics.OUTBOX_PUBLISHED, row.topic).inc()
                outcomes.append(None)
        for span, outcome in zip(spans, outcomes, strict=False):  # spans: the rows sent first
            span.end(outcome)
        return outcomes

    async def _set_aside(self, row_id: int, row: OutboundRecord, error: BaseException) -> None:
        """Keep a row the broker can never take in ``dead_letters``; it is then marked
        published with its batch."""
        reason, kept = await keep_unsendable(
            self._store,
            source=f"outbox:{row_id}",
            topic=row.topic,
            error=error,
            key=row.key,
            value=jsoncodec.dumps(row.payload).encode("utf-8", "backslashreplace"),
        )
        metrics.DLQ.labels(reason=reason).inc()
        log.error(
            "outbox row can never be published; kept in the dead_letters table",
            extra={"reason": reason, "topic": row.topic, "kept_id": kept,
                   "error": type(error).__name__},
        )


def _retryable(outcome: BaseException | None) -> bool:
    """A row's send failed for a reason a retry may fix (not one it can never get past)."""
    return outcome is not None and cannot_succeed(outcome) is None


def _publish_error(failed: BaseException) -> PublishError:
    """What the publisher raises for ``failed``, caused by it (as ``raise ... from``)."""
    error = PublishError(f"publish failed: {type(failed).__name__}")
    error.__cause__ = failed
    return error


async def _settled(futures: list[asyncio.Future[Any]]) -> list[Any]:
    """Each future's result, or the exception it ended with, in order: what
    ``asyncio.gather(*futures, return_exceptions=True)`` gives, awaited one by one.

    A turn's acks nearly always come in one produce response, so once the first is done the
    rest are too and awaiting them does not suspend; gather would add an outer future and a
    scheduled callback per ack, a few microseconds a turn (``bench/README.md``, "The acks
    awaited one by one"). As with gather, an ack the producer cancelled counts as its
    ``CancelledError``, and cancelling the awaiting task cancels the acks still pending and
    raises."""
    outcomes: list[Any] = []
    for index, future in enumerate(futures):
        try:
            outcomes.append(await future)
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if future.cancelled() and not (task is not None and task.cancelling()):
                outcomes.append(exc)  # the producer cancelled this ack, not us
                continue
            for pending in futures[index + 1 :]:
                pending.cancel()
            raise
        except Exception as exc:
            outcomes.append(exc)
    return outcomes
