"""Partition ownership in the consumer loop: drain on a normal revoke, fence at once when the
group has already moved the partitions (a zombie)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka.structs import TopicPartition

from consumer.service import ConsumerService
from consumer.settings import Settings

TP = TopicPartition("in", 0)


class FakeCoordinator:
    def __init__(self, generation: int) -> None:
        self.generation = generation


class FakeConsumer:
    """Just enough of AIOKafkaConsumer for the revoke path: commits are recorded."""

    def __init__(self, generation: int) -> None:
        self._coordinator = FakeCoordinator(generation)
        self.commits: list[dict[TopicPartition, int]] = []

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.commits.append(dict(offsets))

    def assignment(self) -> set[TopicPartition]:
        return {TP}


class NoAgent:
    async def turn(self, request: dict[str, Any]) -> Any:
        raise AssertionError("not called")


def service_with(consumer: FakeConsumer) -> ConsumerService:
    settings = Settings(kafka_bootstrap_servers="127.0.0.1:1",
                        database_url="postgresql://nobody@127.0.0.1:1/x",
                        drain_timeout_ms=60_000)
    service = ConsumerService(settings, NoAgent())
    service._consumer = consumer  # type: ignore[assignment]
    service._on_assigned({TP})
    return service


async def hold_busy(service: ConsumerService, release: asyncio.Event) -> None:
    async with service._busy_on(TP):
        await release.wait()


async def test_revoke_drains_in_flight_work_then_commits() -> None:
    """On a normal revoke the partition stays owned until in-flight work ends, then the done
    offsets are committed and ownership ends."""
    consumer = FakeConsumer(generation=3)
    service = service_with(consumer)
    for offset in (0, 1, 2):
        service._marks.track(TP, offset)
    service._marks.done(TP, 0)
    service._marks.done(TP, 2)
    release = asyncio.Event()
    busy = asyncio.create_task(hold_busy(service, release))
    await asyncio.sleep(0)
    revoke = asyncio.create_task(service._on_revoked({TP}))
    for _ in range(5):
        await asyncio.sleep(0)
    assert service.assignment == {TP}  # still draining: the in-flight turn may publish
    service._marks.done(TP, 1)
    release.set()
    await revoke
    await busy
    assert consumer.commits == [{TP: 3}]
    assert service.assignment == set()


async def test_lost_membership_fences_at_once_without_commit() -> None:
    """When the coordinator already dropped this member, ownership ends immediately (the
    in-flight turn can no longer publish) and nothing is committed."""
    consumer = FakeConsumer(generation=-1)
    service = service_with(consumer)
    service._marks.track(TP, 0)
    service._marks.done(TP, 0)
    release = asyncio.Event()
    busy = asyncio.create_task(hold_busy(service, release))
    await asyncio.sleep(0)
    await service._on_revoked({TP})
    assert service.assignment == set()
    assert not busy.done()  # the turn is still running, but fenced
    assert consumer.commits == []
    release.set()
    await busy


async def test_work_fetched_under_an_old_epoch_is_not_owned_after_reassignment() -> None:
    """A partition revoked and assigned again gets a new epoch; inputs of the old one are
    fenced even though the partition is ours again."""
    service = service_with(FakeConsumer(generation=3))
    old_epoch = service._epochs[TP]
    await service._on_revoked({TP})
    service._on_assigned({TP})
    assert not service._owns(TP, old_epoch)
    assert service._owns(TP, service._epochs[TP])


class RecordingPipeline:
    def __init__(self) -> None:
        self.applied: list[object] = []

    async def apply(self, work: object, **_: object) -> None:
        self.applied.append(work)


async def test_input_waiting_for_a_slot_is_dropped_when_its_partition_moves() -> None:
    """An input that waited for an in-flight slot while its partition was revoked never
    reaches the pipeline (no wasted model call, no save under a lost partition)."""
    from consumer.parser import ParsedInput
    from consumer.partitions import QueuedInput
    from consumer.pipeline import TurnWork
    from consumer.service import _Input
    from store import SourceRecord

    service = service_with(FakeConsumer(generation=3))
    pipeline = RecordingPipeline()
    service._pipeline = pipeline  # type: ignore[assignment]
    work = TurnWork(
        parsed=ParsedInput("s1", "wake", {"session_id": "s1", "wake": "k"}, "wake:k"),
        source=SourceRecord("in", 0, 0),
    )
    entry = QueuedInput("s1", TP, 0, _Input(work=work, record=object(),  # type: ignore[arg-type]
                                            epoch=service._epochs[TP]))
    await service._slots.acquire()
    for _ in range(service._settings.max_in_flight - 1):
        await service._slots.acquire()  # every slot busy
    waiting = asyncio.create_task(service._process(entry))
    await asyncio.sleep(0)
    await service._on_revoked({TP})
    for _ in range(service._settings.max_in_flight):
        service._slots.release()
    await waiting
    assert pipeline.applied == []
