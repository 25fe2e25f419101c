"""Where each owned partition starts, and the database's record of how far it got.

The database, not Kafka, is the source of truth for a partition's progress
(``store.positions``): on assignment each partition is sought to the position the database
holds for the group, so

- after a failover that lost the old primary's last commits (asynchronous replication) the
  inputs behind them are read and run again: their replies and timers come out under the same
  keys as before, so delivery drops the copies the customer already has;
- a group whose committed offsets Kafka lost, or still loads (a restarted coordinator, which
  aiokafka reads as "no offset" and would start at the beginning of the topic), starts where
  it was, not at the start;
- a partition with no stored position (a new group, a database restored from before this
  table) starts at Kafka's committed offset, as it always did.

Kafka's offsets are still committed as before, for lag metrics and tools. The database's are
written after every fetch round, from the same watermarks, in a statement of their own that
runs in the background (a turn's save pays nothing for it, and the fetch loop never waits on
it); a revoke and the shutdown wait a bounded time for the last one. Dead-lettered and skipped
records move it like saved ones: the watermark counts them done.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from consumer import metrics
from store import Store

__all__ = ["SourcePositions"]

log = logging.getLogger("turnflow.consumer")

_COMMITTED_WITHIN_S = 5.0
_RETRY_EVERY_S = 0.5


class SourcePositions:
    """The database positions of one consumer group's partitions: read on assignment,
    written after each fetch round."""

    def __init__(self, store: Store, group: str, *, read_within_s: float) -> None:
        self._store = store
        self._group = group
        self._read_within_s = read_within_s
        self._written: dict[TopicPartition, int] = {}
        self._pending: dict[TopicPartition, int] = {}
        self._writing: asyncio.Task[None] | None = None
        self._failing = False

    @property
    def database_changed(self) -> bool:
        """The database moved to a new timeline (a promotion) under this process: what it
        remembers as done may be lost there, so it must restart (``store.positions``)."""
        return self._store.database_changed

    async def start_assigned(
        self, consumer: AIOKafkaConsumer, assigned: set[TopicPartition]
    ) -> None:
        """Seek each newly assigned partition to the database's position, if it has one.
        Reading is retried for ``read_within_s``; past that the partitions start at Kafka's
        committed offsets, as without this (logged at ERROR)."""
        self.forget(assigned)
        if not assigned:
            return
        # Paused while this waits on the database: the fetch loop runs meanwhile, and records
        # it fetched for these partitions before the service owns them would be dropped
        # (and their offsets passed) or, before the seek, read out of order.
        consumer.pause(*assigned)
        try:
            await self._seek_assigned(consumer, assigned)
        finally:
            with contextlib.suppress(KafkaError):
                consumer.resume(*assigned)

    async def _seek_assigned(
        self, consumer: AIOKafkaConsumer, assigned: set[TopicPartition]
    ) -> None:
        wanted = sorted((tp.topic, tp.partition) for tp in assigned)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._read_within_s
        while True:
            try:
                stored = await asyncio.wait_for(
                    self._store.source_positions(self._group, wanted),
                    max(0.1, deadline - loop.time()),
                )
                break
            except Exception as exc:
                if loop.time() + _RETRY_EVERY_S >= deadline:
                    log.error(
                        "the database's positions could not be read; starting at Kafka's "
                        "committed offsets",
                        extra={"error": type(exc).__name__},
                    )
                    return
                await asyncio.sleep(_RETRY_EVERY_S)
        committed = await self._committed(consumer, assigned)
        for tp in sorted(assigned):
            position = stored.get((tp.topic, tp.partition))
            if position is None:
                continue
            with contextlib.suppress(KafkaError):  # IllegalStateError: no longer assigned
                consumer.seek(tp, position)
                self._written[tp] = position
                kafka = committed.get(tp)
                if kafka is not None and kafka > position:
                    metrics.POSITIONS_REREAD.inc(kafka - position)
                log.info(
                    "partition started at the database's position",
                    extra={"partition": tp.partition, "position": position,
                           "kafka_committed": kafka,
                           "reread": max(0, kafka - position) if kafka is not None else 0},
                )

    @staticmethod
    async def _committed(
        consumer: AIOKafkaConsumer, assigned: set[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Kafka's committed offsets, for the log only (None: none, or not known in time)."""
        found: dict[TopicPartition, int] = {}

        async def one(tp: TopicPartition) -> None:
            with contextlib.suppress(KafkaError, TimeoutError):
                offset = await asyncio.wait_for(consumer.committed(tp), _COMMITTED_WITHIN_S)
                if offset is not None and offset >= 0:
                    found[tp] = offset

        await asyncio.gather(*(one(tp) for tp in assigned))
        return found

    def note(self, marks: dict[TopicPartition, int | None]) -> None:
        """The partitions' current watermarks (everything below done): written in the
        background when they moved past what the database has."""
        for tp, mark in marks.items():
            if mark is not None and mark > self._written.get(tp, -1):
                self._pending[tp] = max(mark, self._pending.get(tp, -1))
        if self._pending and (self._writing is None or self._writing.done()):
            self._writing = asyncio.create_task(self._write(), name="source-positions")

    async def flush(self, partitions: set[TopicPartition], *, within_s: float) -> None:
        """Write what is pending for ``partitions`` now (a revoke, the shutdown), waiting at
        most ``within_s``; given up, the next owner re-reads a little more."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._flush(partitions), within_s)

    async def _flush(self, partitions: set[TopicPartition]) -> None:
        if self._writing is not None:
            await asyncio.wait([self._writing])
        if any(tp in self._pending for tp in partitions):
            await self._write(only=partitions)

    def forget(self, partitions: set[TopicPartition]) -> None:
        """Drop what is known of partitions this consumer no longer owns (or owns afresh)."""
        for tp in partitions:
            self._written.pop(tp, None)
            self._pending.pop(tp, None)

    async def close(self) -> None:
        """Stop a write in flight (shutdown, after the last ``flush``)."""
        if self._writing is not None and not self._writing.done():
            self._writing.cancel()
            await asyncio.wait([self._writing])

    async def _write(self, only: set[TopicPartition] | None = None) -> None:
        batch = {tp: mark for tp, mark in self._pending.items() if only is None or tp in only}
        if not batch:
            return
        try:
            await self._store.save_source_positions(
                self._group, {(tp.topic, tp.partition): mark for tp, mark in batch.items()}
            )
        except Exception as exc:  # an outage: the positions stay pending for the next round
            if not self._failing:  # once per outage, not once per fetch round
                log.warning(
                    "storing the partitions' positions failed; trying again each round",
                    extra={"error": type(exc).__name__},
                )
            self._failing = True
            return
        self._failing = False
        for tp, mark in batch.items():
            if self._pending.get(tp) == mark:
                del self._pending[tp]
            if mark > self._written.get(tp, -1):
                self._written[tp] = mark
