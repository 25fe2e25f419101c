"""The fetch loop: records in, look-ahead bounded per partition, done offsets committed.

Fetched records are parsed; malformed ones go straight to the DLQ (``dead_lettering``), valid
ones join their conversation's queue (``workers``). After every fetch round a commit of the done
offsets is started (``commits``) and the lag observed once it ends.

The loop waits for its commit a quarter of a second at most, then goes on beside it. A commit
answered in time (a round trip or two) paces the loop as an awaited commit does, so a round
fetches what arrived during it. But a commit waits for the group coordinator, and a coordinator
that died is replaced only once Kafka has fenced its broker and moved the leadership of its
``__consumer_offsets`` partition (``broker.session.timeout.ms``, 9 s by default), or the
consumer's own session expired: awaited in the loop, that wait stopped every conversation, those
on healthy partitions included (``tests/faults/test_kafka_cluster.py`` measures it on three
brokers). One commit is in flight at a time; while it waits, fetching and turns go on, and the
next round's commit carries every offset done meanwhile (a commit only ever moves forward).

Look-ahead. Back-pressure is per partition (``Backpressure``): only a partition whose unfinished
records reach its share of ``max_buffered_records`` (or of ``max_buffered_bytes``) stops being
fetched, so one hot conversation never makes the quiet ones on other partitions wait; before
that, a full partition passes over the records of workspaces past their part of its share and
reads them again later (``consumer.turns.passing``), so a flood never hides what follows it.

A fetch error (a corrupt or oversized batch, a topic not readable, a broker gone) is logged at
ERROR and fetching goes on after a growing delay, so one bad partition neither stops the others
nor makes the process exit and fail again on restart.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord, TopicPartition

from consumer import metrics
from consumer.turns.backpressure import Backpressure
from consumer.turns.commits import Commits
from consumer.turns.dead_lettering import DeadLettering
from consumer.turns.ownership import Ownership
from consumer.turns.parser import Rejected, parse_record
from consumer.turns.passing import LookAhead
from consumer.turns.pipeline import TurnWork
from consumer.turns.placement import PlacementCheck
from consumer.turns.runtime import Runtime
from consumer.turns.session_queues import QueuedInput
from consumer.turns.tasks import SideTasks
from consumer.turns.workers import FetchedInput, SessionWorkers
from store import SourceRecord

__all__ = ["Intake"]

# How long a fetch round waits for its commit before fetching again with the commit still under
# way: a commit normally takes a round trip or two, and waiting for it paces the loop as before;
# a coordinator that died is only replaced after Kafka fences its broker (seconds).
_COMMIT_PACE_S = 0.25

log = logging.getLogger("turnflow.consumer")

_FETCH_TIMEOUT_MS = 100


class Intake:
    """Fetches the owned partitions' records and hands each to its conversation or the DLQ."""

    def __init__(
        self,
        runtime: Runtime,
        ownership: Ownership,
        commits: Commits,
        workers: SessionWorkers,
        dead_lettering: DeadLettering,
        side_tasks: SideTasks,
        backpressure: Backpressure[TopicPartition],
        lookahead: LookAhead[TopicPartition],
    ) -> None:
        self._runtime = runtime
        self._ownership = ownership
        self._commits = commits
        self._workers = workers
        self._dead_lettering = dead_lettering
        self._side_tasks = side_tasks
        self.backpressure = backpressure
        # Records past a full partition's share: passed over, read again (consumer.turns.passing).
        self.lookahead = lookahead
        self._placement = PlacementCheck()
        self._committing: asyncio.Task[None] | None = None

    async def fetch_loop(self) -> None:
        """Fetch, hand out and commit until ``stop()``."""
        consumer = self._runtime.consumer
        try:
            await self._fetch_until_stopped(consumer)
        except BaseException:
            await self._end_commit(raise_error=False)
            raise
        await self._end_commit(raise_error=True)

    async def _fetch_until_stopped(self, consumer: AIOKafkaConsumer) -> None:
        runtime = self._runtime
        epochs = self._ownership.epochs
        failures = 0
        while not runtime.stopping.is_set():
            self._apply_backpressure(consumer)
            self.lookahead.rewind(consumer, epochs)  # read what was passed over again
            try:
                batches = await consumer.getmany(
                    timeout_ms=_FETCH_TIMEOUT_MS,
                    max_records=self.backpressure.fetch_limit(len(epochs)),
                )
            except KafkaError as exc:
                # A partition's fetch error (a corrupt or oversized batch, no read permission,
                # a broker gone) is raised here once; ending the process for it would stop
                # every partition and fail again after the restart. Fetching goes on: the other
                # partitions' records keep coming and the finished work is still committed.
                # (A stopped consumer raises ConsumerStoppedError, not a KafkaError.)
                failures += 1
                delay = self._runtime.policy.delay(failures)
                log.error(
                    "fetch failed; fetching again after a delay",
                    extra={"error": type(exc).__name__, "attempt": failures, "delay_s": delay},
                )
                if not await runtime.sleep(delay):
                    break
                batches = {}
            else:
                failures = 0
            for tp, records in batches.items():
                epoch = epochs.get(tp)
                if epoch is None:
                    continue  # revoked while the fetch was in the air
                for record in records:
                    self.accept(tp, record, epoch)
            pending = await self._commit_round(set(epochs), consumer)
            self._commits.note_positions(set(epochs))
            if pending:  # the lag is observed by the commit when it ends
                self._commits.observe_lag(consumer)

    async def _commit_round(self, partitions: set[TopicPartition], consumer: AIOKafkaConsumer
                            ) -> bool:
        """Commit ``partitions``' done offsets and wait for it up to ``_COMMIT_PACE_S``; True
        when the commit is still under way after that (it goes on beside the loop, and the next
        round's commit carries what is done meanwhile). A commit answered in time paces the
        loop as it always did, so each round fetches what arrived during it; one that is not
        (a dead group coordinator) holds back no fetch. No commit starts while one is under way
        or the service stops (the release at shutdown makes the last one). A finished commit's
        own error is raised here, in the loop, as it was when the loop awaited the commit."""
        task = self._committing
        if task is not None:
            if not task.done():
                return True
            self._finish_commit(task)
        if self._runtime.stopping.is_set():
            return False
        if not self._commits.due(partitions):  # most rounds: nothing to commit, nothing to wait
            self._commits.observe_lag(consumer)
            return False
        task = self._committing = asyncio.create_task(
            self._commit_then_observe(partitions, consumer), name="offset-commit"
        )
        await asyncio.wait([task], timeout=_COMMIT_PACE_S)
        if not task.done():
            return True
        self._finish_commit(task)
        return False

    async def _commit_then_observe(self, partitions: set[TopicPartition],
                                   consumer: AIOKafkaConsumer) -> None:
        await self._commits.commit(partitions, until_stop=True)
        self._commits.observe_lag(consumer)

    def _finish_commit(self, task: asyncio.Task[None]) -> None:
        self._committing = None
        if not task.cancelled():
            task.result()

    async def _end_commit(self, *, raise_error: bool) -> None:
        """End the commit under way, as the loop's commits always ended at ``stop()``: one
        still waiting is cancelled (a commit given up; the release at shutdown commits once
        more). A commit that had finished raises its own error when ``raise_error``."""
        task, self._committing = self._committing, None
        if task is None:
            return
        if not task.done():
            task.cancel()
        await asyncio.wait([task])
        if raise_error and not task.cancelled():
            task.result()

    def _apply_backpressure(self, consumer: AIOKafkaConsumer) -> None:
        """Pause the partitions that are behind, resume those that caught up; the others are
        not touched, so their conversations keep their normal latency."""
        marks, epochs = self._commits.marks, self._ownership.epochs
        self.lookahead.owned(len(epochs))
        moves = self.backpressure.update(
            set(epochs), self.lookahead.pressure, marks.pending_bytes
        )
        metrics.LOOKAHEAD_RECORDS.set(marks.pending_count())
        metrics.LOOKAHEAD_BYTES.set(marks.pending_bytes())
        self.lookahead.observe()
        if moves.pause:
            consumer.pause(*moves.pause)
            log.info(
                "partitions paused: too many unfinished records",
                extra={"partitions": sorted(tp.partition for tp in moves.pause)},
            )
        if moves.resume:
            consumer.resume(*moves.resume)
            log.info(
                "partitions resumed",
                extra={"partitions": sorted(tp.partition for tp in moves.resume)},
            )
        metrics.PAUSED_PARTITIONS.set(len(self.backpressure.paused))

    def accept(self, tp: TopicPartition, record: ConsumerRecord[bytes, bytes], epoch: int) -> None:
        """Track ``record``'s offset, then queue it for its conversation or, refused by the
        parser, send it to the DLQ; or, on a full partition, pass it over to read it again
        later (``consumer.turns.passing``)."""
        look = self.lookahead.first_look(tp, record.offset)
        if look == "skip":
            return  # held before (pending or done), or passed over once more
        size = len(record.key or b"") + len(record.value or b"")
        source = SourceRecord(tp.topic, tp.partition, record.offset)
        parsed = parse_record(
            record.key,
            record.value,
            max_bytes=self._runtime.settings.max_record_bytes,
            source=f"{tp.topic}:{tp.partition}:{record.offset}",
        )
        if not isinstance(parsed, Rejected) and look == "new" and not self.lookahead.admit(
            tp, record.offset, parsed, record.timestamp,
            active=self._workers.queues.is_active(parsed.session_id),
        ):
            return  # passed over: read again once the partition has room
        self._commits.marks.track(tp, record.offset, size, again=look == "again")
        if isinstance(parsed, Rejected):
            log.warning(
                "malformed record sent to the DLQ",
                extra={"reason": parsed.reason, "partition": tp.partition,
                       "offset": record.offset},
            )
            self._side_tasks.spawn(
                self._dead_lettering.refused_then_done(tp, record, epoch, parsed)
            )
            return
        self._placement.check(parsed.session_id, tp.topic, tp.partition, self._partitions(tp))
        work = TurnWork(parsed=parsed, source=source, timestamp_ms=record.timestamp)
        self._workers.enqueue(
            QueuedInput(parsed.session_id, tp, record.offset, FetchedInput(work, record, epoch))
        )

    def _partitions(self, tp: TopicPartition) -> int:
        """The partition count of ``tp``'s topic as the consumer's metadata has it (0 unknown)."""
        known = self._runtime.consumer.partitions_for_topic(tp.topic)
        return len(known or ())
