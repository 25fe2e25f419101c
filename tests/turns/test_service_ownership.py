"""Partition ownership in the consumer loop: drain on a normal revoke, fence at once when the
group has already moved the partitions (a zombie); commits and fetches while the broker is in
trouble never hold the loop or the shutdown."""

from __future__ import annotations

import asyncio
import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import ConsumerStoppedError, CorruptRecordException, KafkaError
from aiokafka.structs import TopicPartition

from consumer.hosting.routing import Route
from consumer.settings import Settings
from consumer.turns import commits as commits_module
from consumer.turns.pipeline import TurnFenced
from consumer.turns.service import ConsumerService
from tests.consumer.fakes import FakeKafkaConsumer, FakeProducer, FakeStore, fake_clients
from tests.turns.test_backpressure import until

TP = TopicPartition("in", 0)
NO_ROUTE = Route(agent=None, agent_id=None)  # a turn of no workspace, as with ``AGENT``


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


def service_with(
    consumer: Any, pipeline: Any = None, *, assigned: set[TopicPartition] | None = None,
    **settings: Any,
) -> ConsumerService:
    """A service on doubles: ``consumer``, ``pipeline`` (one that records what it is given,
    by default) and an in-memory store; ``assigned`` (``TP`` by default) is assigned."""
    options: dict[str, Any] = {"drain_timeout_ms": 60_000, **settings}
    clients = fake_clients(consumer, FakeStore(), FakeProducer(),
                           RecordingPipeline() if pipeline is None else pipeline)
    service = ConsumerService(Settings(kafka_bootstrap_servers="127.0.0.1:1", **options),
                              NoAgent(), clients=clients)
    service.parts.handover.assigned({TP} if assigned is None else assigned)
    return service


async def hold_busy(service: ConsumerService, release: asyncio.Event) -> None:
    with service.parts.ownership.busy_on(TP):
        await release.wait()


async def test_revoke_drains_in_flight_work_then_commits() -> None:
    """On a normal revoke the partition stays owned until in-flight work ends, then the done
    offsets are committed and ownership ends."""
    consumer = FakeConsumer(generation=3)
    service = service_with(consumer)
    for offset in (0, 1, 2):
        service.parts.commits.marks.track(TP, offset)
    service.parts.commits.marks.done(TP, 0)
    service.parts.commits.marks.done(TP, 2)
    release = asyncio.Event()
    busy = asyncio.create_task(hold_busy(service, release))
    await asyncio.sleep(0)
    revoke = asyncio.create_task(service.parts.handover.revoked({TP}))
    for _ in range(5):
        await asyncio.sleep(0)
    assert service.assignment == {TP}  # still draining: the in-flight turn may publish
    service.parts.commits.marks.done(TP, 1)
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
    service.parts.commits.marks.track(TP, 0)
    service.parts.commits.marks.done(TP, 0)
    release = asyncio.Event()
    busy = asyncio.create_task(hold_busy(service, release))
    await asyncio.sleep(0)
    await service.parts.handover.revoked({TP})
    assert service.assignment == set()
    assert not busy.done()  # the turn is still running, but fenced
    assert consumer.commits == []
    release.set()
    await busy


async def test_work_fetched_under_an_old_epoch_is_not_owned_after_reassignment() -> None:
    """A partition revoked and assigned again gets a new epoch; inputs of the old one are
    fenced even though the partition is ours again."""
    service = service_with(FakeConsumer(generation=3))
    old_epoch = service.parts.ownership.epochs[TP]
    await service.parts.handover.revoked({TP})
    service.parts.handover.assigned({TP})
    assert not service.parts.ownership.owns(TP, old_epoch)
    assert service.parts.ownership.owns(TP, service.parts.ownership.epochs[TP])


class RecordingPipeline:
    """Loads at once (``loaded``), then takes its turn slot as the real pipeline does, through
    ``before_turn``; only a turn that may run is recorded in ``applied``."""

    def __init__(self) -> None:
        self.loaded: list[object] = []
        self.applied: list[object] = []
        self.forgotten: list[set[tuple[str, int]]] = []

    async def apply(self, work: object, *, before_turn: Any, **_: object) -> None:
        self.loaded.append(work)
        if not await before_turn(NO_ROUTE):
            raise TurnFenced("fenced")
        self.applied.append(work)

    def forget_partitions(self, partitions: set[tuple[str, int]]) -> None:
        self.forgotten.append(partitions)


async def test_input_waiting_for_a_slot_is_dropped_when_its_partition_moves() -> None:
    """An input that waited for an in-flight slot while its partition was revoked never runs
    its turn (no wasted model call, no save under a lost partition), and its offset is not
    released."""
    from consumer.turns.parser import ParsedInput
    from consumer.turns.pipeline import TurnWork
    from consumer.turns.session_queues import QueuedInput
    from consumer.turns.workers import FetchedInput
    from store import SourceRecord

    pipeline = RecordingPipeline()
    service = service_with(FakeConsumer(generation=3), pipeline)
    work = TurnWork(
        parsed=ParsedInput("s1", "wake", {"session_id": "s1", "wake": "k"}, "wake:k"),
        source=SourceRecord("in", 0, 0),
    )
    entry = QueuedInput("s1", TP, 0,
                        FetchedInput(work=work, record=object(),  # type: ignore[arg-type]
                                     epoch=service.parts.ownership.epochs[TP]))
    await service.parts.slots.fair.take("")
    for _ in range(service.settings.max_in_flight - 1):
        await service.parts.slots.fair.take("")  # every slot busy
    waiting = asyncio.create_task(service.parts.attempts.process(entry))
    await asyncio.sleep(0)
    await service.parts.handover.revoked({TP})
    for _ in range(service.settings.max_in_flight):
        service.parts.slots.fair.give_back("")
    await waiting
    assert pipeline.loaded == [work]
    assert pipeline.applied == []
    assert service.parts.slots.fair.free > 0  # the slot it finally took came back
    assert pipeline.forgotten == [{(TP.topic, TP.partition)}]  # its history windows dropped


async def test_an_input_loads_before_its_slot_and_a_revoke_does_not_wait_for_it() -> None:
    """Every slot taken: the input is loaded meanwhile (the load is not spent holding a slot),
    and a revoke drains without waiting for it, since it has not started its turn."""
    consumer = FakeConsumer(generation=3)
    pipeline = RecordingPipeline()
    service = service_with(consumer, pipeline)
    service.parts.commits.marks.track(TP, 0)
    entry = queued(service, "s1", 0)
    for _ in range(service.settings.max_in_flight):
        await service.parts.slots.fair.take("")  # every slot busy
    waiting = asyncio.create_task(service.parts.attempts.process(entry))
    for _ in range(5):
        await asyncio.sleep(0)
    assert pipeline.loaded == [entry.item.work]  # loaded while every slot was taken
    assert pipeline.applied == []
    # drain_timeout_ms is a minute: a revoke that waited for this input would time out here.
    await asyncio.wait_for(service.parts.handover.revoked({TP}), timeout=5)
    assert service.assignment == set()
    for _ in range(service.settings.max_in_flight):
        service.parts.slots.fair.give_back("")
    await asyncio.wait_for(waiting, timeout=5)
    assert pipeline.applied == []  # fenced once it had a slot: the turn never ran
    assert consumer.commits == [{TP: 0}]  # its offset was not released: read again


class SaveBlockedPipeline:
    """Runs its turn at once, then waits on ``save`` (standing for the save and the publish)
    for every session but the one in ``free``."""

    def __init__(self, free: str) -> None:
        self.free = free
        self.save = asyncio.Event()
        self.turned: list[str] = []
        self.finished: list[str] = []

    async def apply(self, work: Any, *, before_turn: Any, after_turn: Any, **_: object) -> None:
        session_id = work.parsed.session_id
        assert await before_turn(NO_ROUTE)  # the turn slot, as the real pipeline takes it
        self.turned.append(session_id)
        after_turn()
        after_turn()  # a second call must not give a second slot back
        if session_id != self.free:
            await self.save.wait()
        self.finished.append(session_id)


def queued(service: ConsumerService, session_id: str, offset: int) -> Any:
    from consumer.turns.parser import ParsedInput
    from consumer.turns.pipeline import TurnWork
    from consumer.turns.session_queues import QueuedInput
    from consumer.turns.workers import FetchedInput
    from store import SourceRecord

    work = TurnWork(
        parsed=ParsedInput(session_id, "wake", {"session_id": session_id, "wake": "k"},
                           f"wake:{session_id}"),
        source=SourceRecord("in", 0, offset),
    )
    record = SimpleNamespace(offset=offset, partition=TP.partition, key=None, value=None)
    return QueuedInput(session_id, TP, offset,
                       FetchedInput(work=work, record=record,  # type: ignore[arg-type]
                                    epoch=service.parts.ownership.epochs[TP]))


async def test_a_turn_gives_its_slot_back_before_its_save() -> None:
    """With one slot, a turn whose save and publish are slow does not hold the next session's
    turn: the slot is given back (once) when the engine turn ends, and the offsets are
    released only after each turn's save and publish."""
    pipeline = SaveBlockedPipeline(free="s2")
    service = service_with(FakeConsumer(generation=3), pipeline, max_in_flight=1)
    for offset in (0, 1):
        service.parts.commits.marks.track(TP, offset)
    first = asyncio.create_task(service.parts.attempts.process(queued(service, "s1", 0)))
    second = asyncio.create_task(service.parts.attempts.process(queued(service, "s2", 1)))
    await asyncio.wait_for(second, timeout=5)
    assert pipeline.turned == ["s1", "s2"]
    assert pipeline.finished == ["s2"]  # ran while s1's save was still waiting
    assert not first.done()
    # s1's offset is not released before its save
    assert service.parts.commits.marks.committable(TP) == 0
    pipeline.save.set()
    await asyncio.wait_for(first, timeout=5)
    assert pipeline.finished == ["s2", "s1"]
    assert service.parts.commits.marks.committable(TP) == 2
    # Each attempt gave exactly one slot back, whatever after_turn's calls: one slot is free.
    assert service.parts.slots.fair.free > 0
    await service.parts.slots.fair.take("")
    assert service.parts.slots.fair.free == 0


async def test_a_turn_that_fails_before_its_save_gives_its_slot_back() -> None:
    """A slot is returned when the attempt ends even if the turn never reached its save."""

    class Failing:
        async def apply(self, work: Any, *, before_turn: Any, **_: object) -> None:
            assert await before_turn(NO_ROUTE)  # holds the only slot ...
            raise ValueError("bad")  # ... and fails before its save

        def forget_partitions(self, partitions: object) -> None:
            pass

    service = service_with(FakeConsumer(generation=3), Failing(), max_in_flight=1,
                           max_retries=0)
    sent: list[str] = []

    async def dead_letter(record: object, reason: str, detail: str) -> None:
        sent.append(reason)

    service.parts.dead_lettering.send = dead_letter  # type: ignore[method-assign]
    service.parts.commits.marks.track(TP, 0)
    await asyncio.wait_for(service.parts.attempts.process(queued(service, "s1", 0)), timeout=5)
    assert sent  # the failure took its path (the DLQ) ...
    assert service.parts.slots.fair.free > 0  # ... and the slot came back


# -- a broker in trouble: commits that hang, fetches that fail --------------------------------


def fetching_service(consumer: Any, **settings: Any) -> ConsumerService:
    """A service on a FakeKafkaConsumer whose every input is a wake that is done at once."""

    class Applied:
        async def apply(self, work: Any, *, before_turn: Any, after_turn: Any,
                        **_: object) -> None:
            assert await before_turn(NO_ROUTE)
            after_turn()

        def forget_partitions(self, partitions: object) -> None:
            pass

    options: dict[str, Any] = {"drain_timeout_ms": 10_000, "merge_bursts": False, **settings}
    return service_with(consumer, Applied(), assigned=set(consumer.logs), **options)


def wake_record(session_id: str) -> tuple[bytes, bytes]:
    body = {"session_id": session_id, "wake": "k"}
    return session_id.encode(), json.dumps(body).encode()


async def test_stop_ends_a_fetch_loop_stuck_in_a_commit() -> None:
    """The group coordinator is out of reach, so the commit never answers: ``stop()`` still
    ends the fetch loop at once, and nothing is recorded as committed."""
    consumer = FakeKafkaConsumer([TP])
    consumer.commit_gate = asyncio.Event()
    service = fetching_service(consumer, session_timeout_ms=60_000)
    consumer.append(TP, *wake_record("s1"))
    loop = asyncio.create_task(service.parts.intake.fetch_loop())
    try:
        await until(lambda: consumer.commit_attempts > 0, "a commit is under way")
        service.stop()
        await asyncio.wait_for(asyncio.shield(loop), timeout=2)
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    assert consumer.commits == []
    assert service.committed_offsets() == {}


async def test_fetching_goes_on_while_a_commit_waits_for_the_coordinator() -> None:
    """A commit that the group coordinator does not answer (a broker killed) holds back no
    fetch: records that arrive meanwhile are fetched and done, and once the coordinator answers
    one commit carries them all, never an offset twice."""
    consumer = FakeKafkaConsumer([TP])
    consumer.commit_gate = asyncio.Event()
    service = fetching_service(consumer, session_timeout_ms=60_000)
    consumer.append(TP, *wake_record("s1"))
    loop = asyncio.create_task(service.parts.intake.fetch_loop())
    try:
        await until(lambda: consumer.commit_attempts > 0, "a commit is under way")
        consumer.append(TP, *wake_record("s2"))
        consumer.append(TP, *wake_record("s3"))
        await until(lambda: consumer.positions[TP] == 3, "the later records are fetched")
        assert consumer.commit_attempts == 1  # one commit in flight at a time
        consumer.commit_gate.set()  # the new coordinator answers
        await until(lambda: consumer.committed(TP) == 3, "the later records are committed")
    finally:
        service.stop()
        await asyncio.wait_for(loop, timeout=2)
    assert consumer.commits[0] == {TP: 1}
    assert [c[TP] for c in consumer.commits] == sorted({c[TP] for c in consumer.commits})


async def test_a_commit_that_times_out_is_retried_by_the_next_one() -> None:
    """A commit unanswered within the session timeout is a failed commit: nothing is recorded
    as committed, the offsets stay marked, and the next commit sends them."""
    consumer = FakeKafkaConsumer([TP])
    consumer.commit_gate = asyncio.Event()
    service = fetching_service(consumer, session_timeout_ms=1000)
    service.parts.commits.marks.track(TP, 0)
    service.parts.commits.marks.done(TP, 0)
    await asyncio.wait_for(service.parts.commits.commit({TP}), timeout=5)
    assert consumer.commit_attempts == 1
    assert consumer.commits == []
    assert service.committed_offsets() == {}
    consumer.commit_gate.set()  # the coordinator is back
    await asyncio.wait_for(service.parts.commits.commit({TP}), timeout=5)
    assert consumer.commits == [{TP: 1}]
    assert service.committed_offsets() == {TP: 1}


async def test_shutdown_release_gives_its_commit_a_short_deadline(monkeypatch: Any) -> None:
    """Stopping while the coordinator is out of reach: the final commit is given up after its
    short deadline, so shutdown goes on to close the consumer; ownership still ends."""
    monkeypatch.setattr(commits_module, "_FINAL_COMMIT_TIMEOUT_S", 0.05)
    consumer = FakeKafkaConsumer([TP])
    consumer.commit_gate = asyncio.Event()
    service = fetching_service(consumer, session_timeout_ms=60_000, drain_timeout_ms=0)
    service.parts.commits.marks.track(TP, 0)
    service.parts.commits.marks.done(TP, 0)
    service.stop()
    await asyncio.wait_for(service.parts.handover.release({TP}, reason="shutdown"), timeout=2)
    assert consumer.commit_attempts == 1
    assert consumer.commits == []
    assert service.assignment == set()


async def test_a_fetch_error_is_logged_and_fetching_goes_on(caplog: Any) -> None:
    """A partition's fetch error (a corrupt batch, say) does not end the consumer: it is logged
    at ERROR by type, fetching resumes after a short delay, and later records are processed
    and committed."""
    consumer = FakeKafkaConsumer([TP])
    consumer.fetch_errors.append(CorruptRecordException())
    service = fetching_service(consumer, retry_backoff_ms=10)
    consumer.append(TP, *wake_record("s1"))
    loop = asyncio.create_task(service.parts.intake.fetch_loop())
    try:
        with caplog.at_level(logging.ERROR, logger="turnflow.consumer"):
            await until(lambda: consumer.committed(TP) == 1, "the record after the error is "
                        "committed")
            assert not loop.done()
    finally:
        service.stop()
        await asyncio.wait_for(loop, timeout=2)
    failed = [r for r in caplog.records if r.getMessage().startswith("fetch failed")]
    assert [(r.levelno, r.error) for r in failed] == [
        (logging.ERROR, "CorruptRecordException")
    ]


async def test_stop_ends_the_backoff_after_a_fetch_error() -> None:
    """Errors that keep coming are retried with a growing delay, which ``stop()`` cuts short;
    an error that means the consumer was stopped is not taken for a fetch error."""
    consumer = FakeKafkaConsumer([TP])
    consumer.fetch_errors.extend(KafkaError() for _ in range(5))
    service = fetching_service(consumer, retry_backoff_ms=60_000)
    loop = asyncio.create_task(service.parts.intake.fetch_loop())
    await until(lambda: len(consumer.fetch_errors) == 4, "the first fetch failed")
    service.stop()
    await asyncio.wait_for(loop, timeout=2)

    stopped = FakeKafkaConsumer([TP])
    stopped.fetch_errors.append(ConsumerStoppedError())
    with pytest.raises(ConsumerStoppedError):
        await asyncio.wait_for(fetching_service(stopped).parts.intake.fetch_loop(), timeout=2)
