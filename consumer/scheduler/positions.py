"""The schedule intake's positions in the database, moved in the same transaction as its timers.

The intake stores a batch of timers, then commits the batch's offsets to Kafka. After a
failover with asynchronous replication the promoted database may lack the last batches while
Kafka holds their offsets: those timers would be gone for good (the turns that set them
survived, so nothing sets them again). So the database keeps the intake group's position per
partition (``store.positions``), written in the same transaction as the batch's timers: a
position implies its timers, on any server. On assignment each partition starts there.

While it runs, the intake checks each write against the position it last wrote (or read on
assignment): a failover that lost its last batches shows as a stored position behind that.
Then nothing is written, the partition is sought back to the stored position, and the lost
batches are read and stored again (an upsert by key: replaying is harmless).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

from store import PositionsMoved, TimerEntry
from store.positions import PositionsUpdate

__all__ = ["IntakePositions", "PositionedSink"]

log = logging.getLogger("turnflow.scheduler.intake")

_READ_WITHIN_S = 10.0
_RETRY_EVERY_S = 0.5

Partition = tuple[str, int]


class PositionedSink(Protocol):
    """The store, as the intake's positions use it."""

    async def upsert_timers(
        self, entries: Sequence[TimerEntry], *, positions: PositionsUpdate | None = None
    ) -> None: ...

    async def source_positions(
        self, group: str, partitions: Sequence[Partition]
    ) -> dict[Partition, int]: ...


class IntakePositions(ConsumerRebalanceListener):  # type: ignore[misc]  # untyped base class
    """Where each owned partition of the schedule topic is, by the database."""

    def __init__(self, sink: PositionedSink, group: str, consumer: AIOKafkaConsumer) -> None:
        self._sink = sink
        self._group = group
        self._consumer = consumer
        self._expected: dict[Partition, int | None] = {}

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        for tp in revoked:
            self._expected.pop((tp.topic, tp.partition), None)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Seek each partition to its stored position (Kafka's committed offset when it has
        none, or when the database does not answer within a few seconds)."""
        # Paused while this waits on the database, so nothing is fetched before the seek.
        self._consumer.pause(*assigned)
        try:
            await self._seek_assigned(assigned)
        finally:
            with contextlib.suppress(KafkaError):
                self._consumer.resume(*assigned)

    async def _seek_assigned(self, assigned: set[TopicPartition]) -> None:
        wanted = sorted((tp.topic, tp.partition) for tp in assigned)
        stored: dict[Partition, int] | None = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _READ_WITHIN_S
        while stored is None:
            try:
                stored = await self._sink.source_positions(self._group, wanted)
            except Exception as exc:
                if loop.time() + _RETRY_EVERY_S >= deadline:
                    log.error(
                        "the database's positions could not be read; starting at Kafka's "
                        "committed offsets",
                        extra={"error": type(exc).__name__},
                    )
                    # Unknown: the first write finds out where they are.
                    stored = {}
                    break
                await asyncio.sleep(_RETRY_EVERY_S)
        for tp in assigned:
            position = stored.get((tp.topic, tp.partition))
            self._expected[(tp.topic, tp.partition)] = position
            if position is not None:
                with contextlib.suppress(KafkaError):
                    self._consumer.seek(tp, position)
                    log.info(
                        "partition started at the database's position",
                        extra={"topic": tp.topic, "partition": tp.partition,
                               "position": position},
                    )

    def update(self, offsets: Mapping[TopicPartition, int]) -> PositionsUpdate:
        """The positions a batch moves to, checked against where they were."""
        new = {(tp.topic, tp.partition): offset for tp, offset in offsets.items()}
        return self._group, {p: self._expected.get(p) for p in new}, new

    def written(self, update: PositionsUpdate) -> None:
        """The batch's transaction committed: its positions are the expected ones now."""
        self._expected.update(update[2])

    def moved(self, error: PositionsMoved) -> None:
        """The stored positions were not where expected (a failover lost the last batches):
        seek each such partition back to where the database has it."""
        for (topic, partition), position in error.stored.items():
            self._expected[(topic, partition)] = position
            if position is None:
                continue
            with contextlib.suppress(KafkaError):
                self._consumer.seek(TopicPartition(topic, partition), position)
            log.warning(
                "the database's position is behind this intake (a failover lost batches); "
                "reading them again",
                extra={"topic": topic, "partition": partition, "position": position},
            )
