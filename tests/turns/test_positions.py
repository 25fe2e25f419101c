"""The consume service's database positions: where a partition starts, and what is written."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka.structs import TopicPartition

from consumer import metrics
from consumer.turns.positions import SourcePositions
from tests.consumer.fakes import FakeStore

T0 = TopicPartition("inbound.turns", 0)
T1 = TopicPartition("inbound.turns", 1)


class SeekingConsumer:
    """What the positions use of the consumer: ``seek`` and ``committed``."""

    def __init__(self, committed: dict[TopicPartition, int | None]) -> None:
        self._committed = committed
        self.seeks: dict[TopicPartition, int] = {}

        self.paused: set[TopicPartition] = set()
        self.was_paused: set[TopicPartition] = set()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        assert tp in self.paused  # nothing is fetched before the seek
        self.seeks[tp] = offset

    def pause(self, *tps: TopicPartition) -> None:
        self.paused.update(tps)
        self.was_paused.update(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.paused.difference_update(tps)

    async def committed(self, tp: TopicPartition) -> int | None:
        return self._committed.get(tp)


class FlakyStore(FakeStore):
    def __init__(self) -> None:
        super().__init__()
        self.failing = False
        self.writes = 0

    async def save_source_positions(self, group: str, positions: Any) -> None:
        if self.failing:
            raise ConnectionRefusedError("down")
        self.writes += 1
        await super().save_source_positions(group, positions)


async def test_assigned_partitions_start_at_the_database_position() -> None:
    """A partition the database has a position for is sought there, behind Kafka (inputs a
    failover lost) or with no Kafka offset at all; one it has none for is left to Kafka."""
    store = FakeStore()
    await store.save_source_positions("g", {("inbound.turns", 0): 40})
    consumer = SeekingConsumer({T0: 50, T1: 7})
    positions = SourcePositions(store, "g", read_within_s=1.0)
    await positions.start_assigned(consumer, {T0, T1})  # type: ignore[arg-type]
    assert consumer.seeks == {T0: 40}
    assert consumer.was_paused == {T0, T1} and not consumer.paused  # resumed once sought

    lost = SeekingConsumer({})
    await positions.start_assigned(lost, {T0})  # type: ignore[arg-type]
    assert lost.seeks == {T0: 40}


async def test_positions_are_written_forward_and_kept_through_an_outage() -> None:
    store = FlakyStore()
    positions = SourcePositions(store, "g", read_within_s=1.0)
    positions.note({T0: 5, T1: None})
    await positions.flush({T0, T1}, within_s=1.0)
    assert store.positions == {("g", "inbound.turns", 0): 5}

    store.failing = True
    positions.note({T0: 9})
    await positions.flush({T0}, within_s=1.0)
    assert store.positions == {("g", "inbound.turns", 0): 5}  # not written, still pending

    store.failing = False
    positions.note({T0: 8})  # an older watermark never takes the pending one back
    await positions.flush({T0}, within_s=1.0)
    assert store.positions == {("g", "inbound.turns", 0): 9}

    writes = store.writes
    positions.note({T0: 9})  # nothing new: no statement
    await asyncio.sleep(0)
    await positions.flush({T0}, within_s=1.0)
    assert store.writes == writes
    await positions.close()


async def test_an_unreadable_database_leaves_the_partitions_to_kafka() -> None:
    class Down(FakeStore):
        async def source_positions(self, group: str, partitions: Any) -> Any:
            raise ConnectionRefusedError("down")

    consumer = SeekingConsumer({T0: 3})
    positions = SourcePositions(Down(), "g", read_within_s=0.6)
    await positions.start_assigned(consumer, {T0})  # type: ignore[arg-type]
    assert consumer.seeks == {}


def test_a_failed_over_database_is_reported() -> None:
    store = FakeStore()
    positions = SourcePositions(store, "g", read_within_s=1.0)  # type: ignore[arg-type]
    assert not positions.database_changed
    store.database_changed = True
    assert positions.database_changed


async def test_positions_behind_kafka_count_the_records_read_again() -> None:
    """A database position 10 behind Kafka's committed offset adds 10 to
    ``turnflow_positions_reread_records_total``; one at or ahead of it, or with no Kafka
    offset, adds nothing."""
    store = FakeStore()
    await store.save_source_positions("g", {("inbound.turns", 0): 40, ("inbound.turns", 1): 9})
    before = metrics.POSITIONS_REREAD._value.get()
    positions = SourcePositions(store, "g", read_within_s=1.0)
    await positions.start_assigned(SeekingConsumer({T0: 50, T1: 7}), {T0, T1})  # type: ignore[arg-type]
    assert metrics.POSITIONS_REREAD._value.get() - before == 10
    await positions.start_assigned(SeekingConsumer({}), {T0})  # type: ignore[arg-type]
    assert metrics.POSITIONS_REREAD._value.get() - before == 10
