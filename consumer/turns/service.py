"""The consumer service: the aiokafka group loop around the pipeline.

Fetched records are parsed; malformed ones go straight to the DLQ, valid ones join their
session's queue. Each session with work has one worker task that takes its inputs strictly in
offset order; workers of different sessions (even in one partition) run concurrently, at most
``max_in_flight`` engine turns at a time (an input's load runs before it takes its slot, its
save and publish after it gave the slot back). Offsets are committed per partition up to the
watermark of ``OffsetWatermarks`` after every fetch round, so a slow session holds back only
its partition's commit, never other sessions' work. A freed slot goes to the waiting turn the
weighted fair queue across workspaces picks (``consumer.turns.fairness``: plans' weights and caps,
a plan's per-minute budget, the model provider's shared back-off). Back-pressure is per partition
(``Backpressure``): only a partition whose unfinished records reach its share of
``max_buffered_records`` (or of ``max_buffered_bytes``) stops being fetched, so one hot
conversation never makes the quiet ones on other partitions wait; before that, a full
partition passes over the records of workspaces past their part of its share and reads them
again later (``consumer.turns.passing``), so a flood never hides what follows it.

Bursts. When a session's worker takes a message and more messages of that session already wait
behind it (``MERGE_BURSTS``, optionally after ``BURST_WINDOW_MS`` of quiet), it takes them too
and the pipeline answers them as one turn; their offsets are released together, after the
turn's save and publish, so a crash before then replays all of them.

Ownership. Each assignment of a partition gets a fresh epoch; an input carries the epoch it was
fetched under and may publish only while that epoch is current. On revoke (and on stop), the
service stops taking work from those partitions, lets in-flight turns finish for up to
``drain_timeout_ms``, commits what is done, then ends the epoch: a turn still running is not
interrupted (cancelling a database write midway buys nothing), but it can no longer publish or
commit. Its saved rows stay for the next owner (which replays the record, finds it applied and
flushes the outbox) or for the relay. The same check stops a zombie that lost its partitions
without noticing from publishing once the consumer learns of it.

Broker trouble. A commit waits at most ``session_timeout_ms`` (the last one at shutdown a few
seconds, and the fetch loop's only until ``stop()``): aiokafka would otherwise wait for an
unreachable group coordinator for as long as the consumer is open, and it is closed only after
that commit. A commit given up is a failed commit: its offsets are sent again with the next
one, and until then a restart replays them. A fetch error (a corrupt or oversized batch, a topic
not readable, a broker gone) is logged at ERROR and fetching goes on after a growing delay, so
one bad partition neither stops the others nor makes the process exit and fail again on restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord, TopicPartition

from consumer import metrics, tracing
from consumer.closing import close_quietly
from consumer.dead_letters import DeadLetterPublisher, RefusedRecords
from consumer.failures import describe
from consumer.health import HealthServer, start_health_server
from consumer.hosting.routing import Route, registry_router
from consumer.outbox import OutboxPublisher, new_producer, start_producer
from consumer.relay import OutboxRelay
from consumer.round_trips import RoundTrips, broker_probe, database_probe
from consumer.settings import Settings
from consumer.stopping import stopped_within
from consumer.turns import crash
from consumer.turns.backpressure import Backpressure
from consumer.turns.decisions import (
    Abandon,
    Commit,
    DeadLetter,
    Fallback,
    Retry,
    RetryPolicy,
    decide,
)
from consumer.turns.fairness import FairSlots, lane_of
from consumer.turns.knowledge import attach_postgres_knowledge
from consumer.turns.model_backoff import SharedBackoff
from consumer.turns.model_calls import observe_model_calls
from consumer.turns.parser import Rejected, parse_record
from consumer.turns.partitions import OffsetWatermarks, QueuedInput, SessionQueues
from consumer.turns.passing import LookAhead
from consumer.turns.pipeline import (
    OutboundTopics,
    TurnAgent,
    TurnFenced,
    TurnPipeline,
    TurnWork,
    burst_of,
)
from consumer.turns.placement import PlacementCheck
from consumer.turns.refused_words import printable, read_refused
from engine import Agent, ProviderError, UnusableReply
from engine.recording import recorded_agent
from store import DeadLetterWords, SourceRecord, Store
from store.model_budget import ModelBudget

__all__ = ["ConsumerService"]

log = logging.getLogger("turnflow.consumer")

_FETCH_TIMEOUT_MS = 100
# The last commit at shutdown, after the drain: short, so ``consumer.stop()`` is always reached
# (a commit not made in time only means more replays after the restart).
_FINAL_COMMIT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class _Input:
    """A queued input: the pipeline's work, the raw record (for the DLQ), its epoch."""

    work: TurnWork
    record: ConsumerRecord[bytes, bytes]
    epoch: int


_Entry = QueuedInput[TopicPartition, _Input]


class _Slot:
    """One of the ``max_in_flight`` turn slots, held for the engine turn alone: taken after the
    input's load (the pipeline's ``before_turn``), given back when the engine turn returns or
    raises (``after_turn``) or, at the latest, when the attempt ends. The load before and the
    save, publish and mark after are database and broker round trips that need no model call,
    so they do not hold a slot another session's turn could use. The session's worker still
    takes its inputs one at a time, load to publish, so a session's order is unchanged; what
    waits loaded for a slot, or for its save, is bounded by the sessions with queued inputs
    (``max_buffered_records``). A turn rerun after a version conflict takes a slot again."""

    def __init__(self, slots: FairSlots) -> None:
        self._slots = slots
        self._held: str | None = None
        self._loading: tuple[FairSlots, str] | None = None

    async def load(self, loads: FairSlots, tenant: str, conversation: str, lane: str) -> None:
        """Wait for a turn to load: loads go by the fair queue too, so one workspace's thousands
        of new conversations do not queue on the database pool ahead of another's one."""
        await loads.take(tenant, conversation=conversation, lane=lane)
        self._loading = (loads, tenant)

    def loaded(self) -> None:
        """The load is over (the turn waits for its slot, or the attempt ended)."""
        if self._loading is not None:
            (loads, tenant), self._loading = self._loading, None
            loads.give_back(tenant)

    async def take(
        self, tenant: str, *, weight: float, cap: int | None, conversation: str, lane: str
    ) -> None:
        """Wait for a slot as a turn of ``conversation`` in workspace ``tenant``
        (``consumer.turns.fairness``: lanes take turns, the least served conversation first)."""
        self.loaded()
        await self._slots.take(tenant, weight=weight, cap=cap, conversation=conversation,
                               lane=lane)
        self._held = tenant
        metrics.IN_FLIGHT.inc()

    def give_back(self) -> None:
        self.loaded()
        if self._held is not None:
            tenant, self._held = self._held, None
            metrics.IN_FLIGHT.dec()
            self._slots.give_back(tenant)


@dataclass
class _ModelWait:
    """One input's wait on the model: since its first retryable provider failure (by the
    event loop's clock), and whether it counts in ``turnflow_model_waiting_conversations``."""

    since: float | None = None
    counted: bool = False


def _outage(error: BaseException | None) -> bool:
    """The model could not be reached (not: it answered with nothing usable)."""
    return (
        isinstance(error, ProviderError)
        and error.kind == "retryable"
        and not isinstance(error, UnusableReply)
    )


def _agent_name(agent: Any) -> str:
    if agent is None:
        return "registry"
    name = getattr(agent, "name", None)
    return name if isinstance(name, str) else type(agent).__name__


def _dead_letter_words(record: ConsumerRecord[bytes, bytes], detail: str) -> DeadLetterWords:
    """What a dead-lettered record says about its customer, kept for the inspector."""
    words = read_refused(record.key, record.value)
    return DeadLetterWords(
        message=words.message, input_id=words.input_id, key=words.key,
        detail=printable(detail, 1000),
    )


def _log_crash(task: asyncio.Task[None]) -> None:
    """A worker that died of a bug holds its partition's commit back (the lag shows it)."""
    if not task.cancelled() and task.exception() is not None:
        log.error(
            "session worker crashed; its input stays uncommitted until the partition moves",
            extra={"error": type(task.exception()).__name__},
        )


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]  # untyped base class
    def __init__(self, service: ConsumerService) -> None:
        self._service = service

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._service._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._service._on_assigned(set(assigned))


class ConsumerService:
    """``turnflow consume``: run until ``stop()``; then drain, commit and close cleanly."""

    def __init__(
        self,
        settings: Settings,
        agent: TurnAgent | None,
        *,
        store: Store | None = None,
        run_relay: bool = True,
        client_id: str = "turnflow-consumer",
        metrics_exports: tuple[str, ...] = ("consume",),
    ) -> None:
        settings.require_servers(database=store is None)
        self._settings = settings
        self._agent = agent
        self._store = store
        self._owns_store = store is None
        self._run_relay = run_relay
        self._client_id = client_id
        self._metrics_exports = metrics_exports
        self._policy = RetryPolicy(
            max_retries=settings.max_retries,
            backoff_s=settings.retry_backoff_ms / 1000,
            backoff_max_s=settings.retry_backoff_max_ms / 1000,
            model_outage_s=settings.model_outage_max_ms / 1000,
            jitter=settings.retry_jitter,
        )
        self._marks: OffsetWatermarks[TopicPartition] = OffsetWatermarks()
        self._queues: SessionQueues[TopicPartition, _Input] = SessionQueues()
        self._slots = FairSlots(settings.max_in_flight)
        self._loads = FairSlots(min(settings.max_in_flight, 20))  # as many as pooled connections
        self._plan_weights = settings.plan_weight_map()
        self._plan_caps = settings.plan_cap_map()
        self._plan_per_minute = settings.plan_per_minute_map()
        # Workspaces whose per-minute budget ran out, until when (the event loop's clock): their
        # other turns wait for that without asking the database again.
        self._budget_closed: dict[str, float] = {}
        self._budget: ModelBudget | None = None
        self._backoff = SharedBackoff(
            first_delay_s=settings.retry_backoff_ms / 1000,
            max_s=settings.retry_backoff_max_ms / 1000,
        )
        self._backoff_timer: asyncio.TimerHandle | None = None
        # Plan label values: the plans the settings name, and default (bounded, not per workspace).
        self._plan_labels = {
            "default", *self._plan_weights, *self._plan_caps, *self._plan_per_minute
        }
        for label in (*self._plan_labels, "other", "none"):  # every series from the start, at 0
            for family in (metrics.TURNS_WAITING, metrics.SLOT_WAIT, metrics.PLAN_CAP_WAITS,
                           metrics.PLAN_MINUTE_WAITS):
                family.labels(plan=label)
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._side_tasks: set[asyncio.Task[None]] = set()
        self._epochs: dict[TopicPartition, int] = {}
        self._epoch_counter = 0
        self._committed: dict[TopicPartition, int] = {}
        self._starts: dict[TopicPartition, int] = {}
        self._busy: Counter[TopicPartition] = Counter()
        self._busy_changed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._backpressure: Backpressure[TopicPartition] = Backpressure(
            settings.max_buffered_records, settings.max_buffered_bytes
        )
        # Records past a full partition's share: passed over, read again (consumer.turns.passing).
        self._lookahead = LookAhead(self._marks, self._backpressure, settings.max_passed_over)
        self._ready = False
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._pipeline: TurnPipeline | None = None
        self._publisher: OutboxPublisher | None = None
        self._dead_letters: DeadLetterPublisher | None = None
        self._refused = RefusedRecords()
        self._placement = PlacementCheck()
        self._relay: OutboxRelay | None = None
        self._relay_task: asyncio.Task[None] | None = None
        self._health: HealthServer | None = None
        self._round_trips: RoundTrips | None = None
        self.started = asyncio.Event()

    # -- lifecycle --------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the service to shut down (safe from a signal handler)."""
        self._stopping.set()

    def ready(self) -> bool:
        """Consuming, not stopping, and the broker and the database answered just now."""
        trips = self._round_trips
        return self._ready and not self._stopping.is_set() and trips is not None and trips.fresh()

    @property
    def health_port(self) -> int | None:
        return self._health.port if self._health is not None else None

    @property
    def assignment(self) -> set[TopicPartition]:
        return set(self._epochs)

    def committed_offsets(self) -> dict[TopicPartition, int]:
        """The offsets this consumer committed for the partitions it owns now."""
        return dict(self._committed)

    async def run(self) -> None:
        """Start, consume until ``stop()``, shut down cleanly."""
        try:
            await self._start()
            self._ready = True
            self.started.set()
            log.info(
                "consumer ready",
                extra={"group_id": self._settings.group_id, "port": self.health_port},
            )
            await self._fetch_loop()
        finally:
            self._ready = False
            await self._shutdown()

    async def _start(self) -> None:
        s = self._settings
        bootstrap = s.kafka_bootstrap_servers
        assert bootstrap is not None
        options = s.kafka_client_options()
        self._health = await start_health_server(
            s, ready=self.ready, exports=self._metrics_exports
        )
        metrics.set_build_info("consume", agent=_agent_name(self._agent))
        metrics.precreate_topics((s.messages_topic, s.schedule_topic))
        if self._store is None:
            assert s.database_url is not None
            # No overflow: a connection opened for a burst and closed after it costs the
            # server a backend and the client a handshake and fresh prepared statements; a
            # turn waiting a moment for a pooled one costs neither.
            self._store = await Store.connect(
                s.database_url, pool_size=min(s.max_in_flight, 20), max_overflow=0
            )
        self._producer = new_producer(
            bootstrap,
            idempotent=s.kafka_idempotent_producer,
            client_id=self._client_id,
            **options,
        )
        await start_producer(self._producer, idempotent=s.kafka_idempotent_producer)
        publisher = self._publisher = OutboxPublisher(self._store, self._producer)
        if self._plan_per_minute:
            self._budget = ModelBudget(self._store.engine)
        self._dead_letters = DeadLetterPublisher(self._producer, self._store, s.dlq_topic)
        if self._agent is not None:
            observe_model_calls(self._agent)
            self._agent = await attach_postgres_knowledge(self._agent, s.database_url)
            if isinstance(self._agent, Agent):
                self._agent = recorded_agent(self._agent)
        # AGENT_REGISTRY: the registry's agents, by each record's agent_id (routing.py).
        router = registry_router(s, self._store, self._agent) if s.agent_registry else None
        self._pipeline = TurnPipeline(
            store=self._store,
            agent=self._agent,
            publisher=publisher,
            topics=OutboundTopics(messages=s.messages_topic, schedule=s.schedule_topic),
            history_limit=s.history_limit,
            history_cache_sessions=s.history_cache_sessions,
            max_version_conflicts=s.max_version_conflicts,
            recording=s.model_recording,
            router=router,
        )
        if self._run_relay:
            self._relay = OutboxRelay(
                publisher,
                self._store,
                interval_s=s.relay_interval_ms / 1000,
                grace_s=s.relay_grace_ms / 1000,
                recording_retention=s.recording_retention(),
                outbox_retention=s.outbox_retention(),
                dead_letter_retention=s.dead_letter_retention(),
            )
            self._relay_task = asyncio.create_task(self._relay.run(), name="outbox-relay")
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=s.group_id,
            client_id=self._client_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=max(s.max_record_bytes * 4, 1 << 20),
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=s.heartbeat_interval_ms,
            rebalance_timeout_ms=s.session_timeout_ms + s.drain_timeout_ms,
            fetch_max_wait_ms=s.kafka_fetch_max_wait_ms,
            **options,
        )
        self._consumer.subscribe([s.inbound_topic], listener=_Rebalance(self))
        await self._consumer.start()
        self._round_trips = RoundTrips({
            "broker": broker_probe(self._producer.client),
            "database": database_probe(self._store.engine),
        })
        await self._round_trips.check_once()
        self._round_trips.start()

    async def _shutdown(self) -> None:
        if self._round_trips is not None:
            await self._round_trips.stop()
        consumer = self._consumer
        if consumer is not None:
            owned = set(self._epochs)
            if owned:
                await self._release(owned, reason="shutdown")
            await close_quietly(consumer.stop(), "the consumer")
            self._consumer = None
        # Work left running after the drain is fenced; stop it before closing the store.
        await self._cancel(list(self._workers.values()) + list(self._side_tasks))
        if self._relay is not None and self._relay_task is not None:
            self._relay.stop()
            await asyncio.gather(self._relay_task, return_exceptions=True)
        # A grouped statement outlives the turns that were waiting for it; end it while the
        # pool is open, or the connection it holds is never closed.
        if self._pipeline is not None:
            await self._pipeline.close()
        if self._publisher is not None:
            await self._publisher.close()
        if self._producer is not None:
            await close_quietly(self._producer.stop(), "the producer")
            self._producer = None
        if self._store is not None and self._owns_store:
            await self._store.close()
        if self._health is not None:
            await self._health.stop()
        if self.started.is_set():
            log.info("consumer stopped")

    # -- fetching ---------------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        failures = 0
        while not self._stopping.is_set():
            self._apply_backpressure(consumer)
            self._lookahead.rewind(consumer, self._epochs)  # read what was passed over again
            try:
                batches = await consumer.getmany(
                    timeout_ms=_FETCH_TIMEOUT_MS,
                    max_records=self._backpressure.fetch_limit(len(self._epochs)),
                )
            except KafkaError as exc:
                # A partition's fetch error (a corrupt or oversized batch, no read permission,
                # a broker gone) is raised here once; ending the process for it would stop
                # every partition and fail again after the restart. Fetching goes on: the other
                # partitions' records keep coming and the finished work is still committed.
                # (A stopped consumer raises ConsumerStoppedError, not a KafkaError.)
                failures += 1
                delay = self._policy.delay(failures)
                log.error(
                    "fetch failed; fetching again after a delay",
                    extra={"error": type(exc).__name__, "attempt": failures, "delay_s": delay},
                )
                if not await self._sleep(delay):
                    break
                batches = {}
            else:
                failures = 0
            for tp, records in batches.items():
                epoch = self._epochs.get(tp)
                if epoch is None:
                    continue  # revoked while the fetch was in the air
                for record in records:
                    self._accept(tp, record, epoch)
            await self._commit(set(self._epochs), until_stop=True)
            self._observe_lag(consumer)

    def _apply_backpressure(self, consumer: AIOKafkaConsumer) -> None:
        """Pause the partitions that are behind, resume those that caught up; the others are
        not touched, so their conversations keep their normal latency."""
        self._lookahead.owned(len(self._epochs))
        moves = self._backpressure.update(
            set(self._epochs), self._lookahead.pressure, self._marks.pending_bytes
        )
        metrics.LOOKAHEAD_RECORDS.set(self._marks.pending_count())
        metrics.LOOKAHEAD_BYTES.set(self._marks.pending_bytes())
        self._lookahead.observe()
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
        metrics.PAUSED_PARTITIONS.set(len(self._backpressure.paused))

    def _accept(self, tp: TopicPartition, record: ConsumerRecord[bytes, bytes], epoch: int) -> None:
        look = self._lookahead.first_look(tp, record.offset)
        if look == "skip":
            return  # held before (pending or done), or passed over once more
        size = len(record.key or b"") + len(record.value or b"")
        source = SourceRecord(tp.topic, tp.partition, record.offset)
        parsed = parse_record(
            record.key,
            record.value,
            max_bytes=self._settings.max_record_bytes,
            source=f"{tp.topic}:{tp.partition}:{record.offset}",
        )
        if not isinstance(parsed, Rejected) and look == "new" and not self._lookahead.admit(
            tp, record.offset, parsed, record.timestamp,
            active=self._queues.is_active(parsed.session_id),
        ):
            return  # passed over: read again once the partition has room
        self._marks.track(tp, record.offset, size, again=look == "again")
        if isinstance(parsed, Rejected):
            log.warning(
                "malformed record sent to the DLQ",
                extra={"reason": parsed.reason, "partition": tp.partition,
                       "offset": record.offset},
            )
            self._spawn_side(self._refused_then_done(tp, record, epoch, parsed))
            return
        self._placement.check(parsed.session_id, tp.topic, tp.partition, self._partitions(tp))
        work = TurnWork(parsed=parsed, source=source, timestamp_ms=record.timestamp)
        entry = QueuedInput(parsed.session_id, tp, record.offset, _Input(work, record, epoch))
        if self._queues.enqueue(entry):
            worker = asyncio.create_task(
                self._session_worker(parsed.session_id), name=f"session-{parsed.session_id}"
            )
            worker.add_done_callback(_log_crash)
            self._workers[parsed.session_id] = worker

    def _partitions(self, tp: TopicPartition) -> int:
        """The partition count of ``tp``'s topic as the consumer's metadata has it (0 unknown)."""
        known = self._consumer.partitions_for_topic(tp.topic) if self._consumer else None
        return len(known or ())

    # -- work -------------------------------------------------------------------------------

    def _owns(self, tp: TopicPartition, epoch: int) -> bool:
        return self._epochs.get(tp) == epoch

    async def _session_worker(self, session_id: str) -> None:
        try:
            while (entry := self._queues.take(session_id)) is not None:
                await self._process(*await self._with_burst(entry))
        finally:
            self._workers.pop(session_id, None)
            if self._queues.is_active(session_id):
                # Cancelled with inputs still queued: they were fenced; forget them so a later
                # assignment starts this session afresh.
                self._queues.discard_session(session_id)

    async def _with_burst(self, entry: _Entry) -> list[_Entry]:
        """The input taken and, when it is a message, the messages of its session waiting
        right behind it (after the quiet period, if one is set): they are answered as one
        turn. Wakes, events and starts never wait and never join a burst, and neither does a
        message whose ``context`` or ``silenced`` differs from the first's: one turn has one
        of each, so a message the host silenced is never answered because a plain one came
        after it, nor a plain one left unanswered because a silenced one did."""
        settings = self._settings
        if not settings.merge_bursts or entry.item.work.parsed.kind != "message":
            return [entry]
        if settings.burst_window_ms > 0:
            await self._sleep(settings.burst_window_ms / 1000)
        tp, epoch = entry.partition, entry.item.epoch
        first = entry.item.work.parsed.request

        def joins(waiting: _Entry) -> bool:
            request = waiting.item.work.parsed.request
            return (
                waiting.item.work.parsed.kind == "message"
                and waiting.partition == tp
                and waiting.item.epoch == epoch
                and request.get("context") == first.get("context")
                and request.get("silenced") == first.get("silenced")
            )

        following = self._queues.take_following(
            entry.session_id, joins, settings.burst_max_messages - 1
        )
        return [entry, *following]

    async def _process(self, *entries: _Entry) -> None:
        """Run one turn for ``entries`` (one input, or a burst of one session's messages in
        offset order) and release their offsets together once it is saved and published."""
        work = burst_of([e.item.work for e in entries])
        ids = {"session_id": work.parsed.session_id, "input_id": work.parsed.input_id,
               "inputs": len(entries)}
        # How long this input has waited on the model; it counts in
        # ``turnflow_model_waiting_conversations`` from its first outage retry until it ends.
        # (try/finally rather than a generator context manager, here and in ``_attempts`` and
        # ``_take_slot``: each of those costs a turn about 1.5 µs more.)
        waiting = _ModelWait()
        records = [e.item.record for e in entries]
        span = tracing.process_span(records, group=self._settings.group_id,
                                    conversation_id=work.parsed.session_id)
        try:
            with span:
                await self._attempts(entries, work, ids, waiting)
        finally:
            if waiting.counted:
                metrics.MODEL_WAITING.dec()

    async def _attempts(
        self, entries: tuple[_Entry, ...], work: TurnWork, ids: dict[str, Any], waiting: _ModelWait
    ) -> None:
        first, last = entries[0], entries[-1]
        tp, item = first.partition, first.item
        loop = asyncio.get_running_loop()
        attempt = 1
        failing_since: float | None = None  # the loop's time of this input's first failure
        while True:
            if not self._owns(tp, item.epoch):
                return
            error: BaseException | None = None
            slot = _Slot(self._slots)
            await slot.load(self._loads, *self._lookahead.guess(work.parsed))
            if not self._owns(tp, item.epoch):
                slot.give_back()
                return
            self._busy[tp] += 1  # work on ``tp`` for a revoke to wait for, as ``_busy_on``
            try:
                try:
                    assert self._pipeline is not None
                    await self._pipeline.apply(
                        work,
                        may_publish=lambda: self._owns(tp, item.epoch),
                        before_turn=partial(self._take_slot, slot, tp, item.epoch, work),
                        after_turn=slot.give_back,
                    )
                except TurnFenced:
                    return  # the partition moved while this input waited for a slot
                except Exception as exc:
                    error = exc
            finally:
                self._busy[tp] -= 1
                self._busy_changed.set()
                slot.give_back()
            self._note_backoff(error)
            if _outage(error) and waiting.since is None:
                waiting.since = loop.time()
            decision = decide(
                error,
                attempt=attempt,
                policy=self._policy,
                waited_s=0.0 if waiting.since is None else loop.time() - waiting.since,
                draw=random.random(),
                answerable=work.parsed.kind == "message" and work.fallback is None,
            )
            if error is not None and failing_since is None:
                failing_since = loop.time()
            if error is not None and failing_since is not None and not isinstance(
                decision, DeadLetter | Abandon
            ):
                # Kept with the turn that finally runs: the inspector shows the retries.
                failed = 1 + int((work.retries or {}).get("attempts", 0))
                work = dataclasses.replace(work, retries={
                    "attempts": failed,
                    "last_error": describe(error),
                    "waited_ms": int((loop.time() - failing_since) * 1000),
                })
            if isinstance(decision, Fallback | Retry):
                tracing.note_failed_attempt(decision.reason, error)
            if isinstance(decision, Fallback):
                # The model could not answer in time: the message is answered without it.
                metrics.MODEL_FALLBACKS.labels(reason=decision.reason).inc()
                log.warning(
                    "the model could not answer; sending the fallback message",
                    extra=ids | {"reason": decision.reason, "attempt": attempt,
                                 "error": type(error).__name__},
                )
                work = dataclasses.replace(work, fallback={
                    "reason": decision.reason,
                    "message": self._settings.model_fallback_message,
                })
                if waiting.counted:  # no longer waiting on the model
                    waiting.counted = False
                    metrics.MODEL_WAITING.dec()
                attempt = 1
                continue
            if isinstance(decision, Commit):
                for entry in entries:
                    self._done(tp, entry.offset, item.epoch)
                return
            if isinstance(decision, Abandon):
                log.info("input abandoned", extra=ids | {"reason": decision.reason})
                return
            if isinstance(decision, DeadLetter):
                if len(entries) > 1:
                    # One bad message must not take the others with it: answer each alone,
                    # so only the one that fails on its own reaches the DLQ.
                    log.warning(
                        "burst failed; answering its messages one by one",
                        extra=ids | {"reason": decision.reason, "error": type(error).__name__},
                    )
                    for entry in entries:
                        await self._process(entry)
                    return
                log.warning(
                    "input sent to the DLQ",
                    extra=ids | {"reason": decision.reason, "attempt": attempt,
                                 "error": type(error).__name__},
                )
                metrics.TURN_OUTCOMES.labels(outcome="error").inc()
                tracing.fail_turn(decision.reason, error)
                await self._dead_letter_then_done(
                    tp, last.item.record, item.epoch, decision, session_id=work.parsed.session_id
                )
                return
            assert isinstance(decision, Retry)
            metrics.INPUT_RETRIES.inc()
            if decision.reason == "provider-retryable" and not waiting.counted:
                waiting.counted = True
                metrics.MODEL_WAITING.inc()
            log.warning(
                "input failed; retrying this session after a delay",
                extra=ids | {"reason": decision.reason, "attempt": attempt,
                             "delay_s": decision.delay_s, "error": type(error).__name__},
            )
            if not await self._sleep(decision.delay_s):
                return
            attempt += 1

    async def _refused_then_done(
        self,
        tp: TopicPartition,
        record: ConsumerRecord[bytes, bytes],
        epoch: int,
        why: Rejected,
    ) -> None:
        """A record the parser refused goes to the DLQ once, in its partition's order
        (``RefusedRecords``): on a reread of the partition (a new group id, lost offsets, a
        crash before the commit) its stored source is found and it is skipped, not sent
        again. Its source is stored under the session id the record names when it is usable,
        else under ``""``."""
        async with self._refused.lane(tp):
            found: list[bool] = []

            async def look_up() -> None:
                assert self._store is not None
                found.append(await self._refused.sent_before(self._store, tp, record.offset))

            if not await self._while_owned(
                tp, epoch, look_up, "looking up a refused record failed; retrying"
            ):
                return
            if found[-1]:
                metrics.REPLAYS_SKIPPED.inc()
                log.info(
                    "refused record already sent to the DLQ; skipped",
                    extra={"reason": why.reason, "partition": tp.partition,
                           "offset": record.offset},
                )
                self._done(tp, record.offset, epoch)
                return
            # Stored under the session it names when it names a usable one (a bad ``at``, a
            # wrong key), so its conversation's page and list show it; else under "".
            named = read_refused(record.key, record.value).session_id
            # A span of its own, failed with the reason: the dead letter carries its context.
            with tracing.process_span([record], group=self._settings.group_id,
                                      conversation_id=named or ""):
                tracing.fail_turn(why.reason)
                await self._dead_letter_then_done(tp, record, epoch, why, session_id=named or "")
            self._refused.sent(tp, record.offset)

    async def _dead_letter_then_done(
        self,
        tp: TopicPartition,
        record: ConsumerRecord[bytes, bytes],
        epoch: int,
        why: Rejected | DeadLetter,
        *,
        session_id: str | None = None,
    ) -> None:
        """Send the original record to the DLQ (retrying the broker), then release its offset.

        With ``session_id`` (an input's conversation, ``""`` for a record the parser refused),
        the record's source is then stored as dead-lettered before the offset is released: a replay
        after a crash finds it there and skips it, as it skips a record in the turn log, instead
        of answering it late, after the inputs behind it, or dead-lettering it twice. In that
        order: stored first and lost before the send, the record would never reach the DLQ."""
        # Only the broker can fail the send, and only the database the store; whatever they
        # raise, the record is not released unless it reached the DLQ (and, for an input of a
        # conversation, its source was stored).
        if not await self._while_owned(
            tp, epoch, partial(self._send_dead_letter, record, why.reason, why.detail),
            "DLQ publish failed; retrying",
        ):
            return
        metrics.DLQ.labels(reason=why.reason).inc()
        if session_id is not None:
            source = SourceRecord(tp.topic, tp.partition, record.offset)
            assert self._store is not None
            if not await self._while_owned(
                tp, epoch,
                partial(self._store.record_dead_lettered, session_id, [source], why.reason,
                        words=_dead_letter_words(record, why.detail)),
                "storing a dead-lettered source failed; retrying", session_id=session_id,
            ):
                return
        self._done(tp, record.offset, epoch)

    async def _while_owned(
        self,
        tp: TopicPartition,
        epoch: int,
        work: Callable[[], Awaitable[Any]],
        failed: str,
        **ids: str,
    ) -> bool:
        """Run ``work`` until it succeeds, backing off after each failure (logged as ``failed``,
        with ``ids``), while ``tp`` is owned; False when the partition moved or the service
        stops first (the offset then stays, and the record is replayed)."""
        attempt = 1
        while self._owns(tp, epoch):
            try:
                with self._busy_on(tp):
                    await work()
            except Exception as exc:
                delay = self._policy.delay(attempt)
                log.warning(
                    failed, extra={"error": type(exc).__name__, "delay_s": delay} | ids
                )
                if not await self._sleep(delay):
                    return False
                attempt += 1
                continue
            return True
        return False

    async def _send_dead_letter(
        self, record: ConsumerRecord[bytes, bytes], reason: str, detail: str
    ) -> None:
        assert self._dead_letters is not None
        kept = await self._dead_letters.publish(record, reason, detail)
        if kept is not None:
            log.warning(
                "record too large for the DLQ topic; kept in the dead_letters table",
                extra={"reason": reason, "partition": record.partition,
                       "offset": record.offset, "kept_id": kept},
            )

    def _done(self, tp: TopicPartition, offset: int, epoch: int) -> None:
        if self._owns(tp, epoch):
            self._marks.done(tp, offset)
            self._lookahead.done(tp, offset)

    async def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; False when the service is stopping (the caller gives up)."""
        return not await stopped_within(self._stopping, seconds)

    async def _take_slot(
        self, slot: _Slot, tp: TopicPartition, epoch: int, work: TurnWork, route: Route
    ) -> bool:
        """The pipeline's ``before_turn``: wait for a turn slot, then say whether the input
        may still run. Loaded and waiting, it is not work on ``tp`` (inside the count its
        caller holds, uncounted meanwhile), so a revoke drains the turns that run without
        waiting for this one, which then finds itself fenced.

        The slot is the fair queue's (``consumer.turns.fairness``): the turn waits as one of its
        workspace's (``""`` without one), weighted and capped by the workspace's plan. A wait
        of a millisecond or more is kept on ``work`` (``queued``), for ``turnflow inspect`` to
        show with the turn."""
        slot.loaded()  # loaded: a plan's budget or the back-off must not hold up others' loads
        tenant = route.workspace or ""
        self._lookahead.tenants.learn(work.parsed.session_id, work.parsed.agent_id, route.workspace)
        plan = route.plan or "default"
        # A turn of no workspace (``AGENT``) has no plan: no weight, no cap, no budget.
        cap = self._plan_caps.get(plan) if route.workspace is not None else None
        weight = self._plan_weights.get(plan, 1.0) if route.workspace is not None else 1.0
        label = "none" if route.workspace is None else (
            plan if plan in self._plan_labels else "other"
        )
        why: list[str] = []
        if self._slots.at_cap(tenant, cap):
            metrics.child(metrics.PLAN_CAP_WAITS, label).inc()
            why.append("plan-cap")
        waiting = metrics.child(metrics.TURNS_WAITING, label)
        self._busy[tp] -= 1
        self._busy_changed.set()
        waiting.inc()
        started = time.perf_counter()
        try:
            per_minute = self._plan_per_minute.get(plan)
            if per_minute is not None and route.workspace is not None:
                if await self._minute_budget(route.workspace, per_minute, label):
                    why.append("minute-budget")
            if self._backoff.remaining(asyncio.get_running_loop().time()) > 0:
                why.append("model-backoff")
                await self._provider_backoff()
            await slot.take(tenant, weight=weight, cap=cap,
                            conversation=work.parsed.session_id, lane=lane_of(work.parsed))
        finally:
            waiting.dec()
            waited = time.perf_counter() - started
            metrics.child(metrics.SLOT_WAIT, label).observe(waited)
            if waited >= 0.001:
                work.queued.update(waited_ms=int(waited * 1000), plan=label, why=why or ["slots"])
            self._busy[tp] += 1
        return self._owns(tp, epoch)

    async def _minute_budget(self, workspace: str, per_minute: int, label: str) -> bool:
        """Take one turn from the workspace's budget for this minute, shared by every consumer
        (``store.model_budget``), waiting for the next minute as long as it is spent. The turn
        holds no slot meanwhile. The database failing to answer lets the turn go: a cap that
        stops every turn of a workspace while the database is away would be an outage. True
        when the spent budget made the turn wait."""
        assert self._budget is not None
        loop = asyncio.get_running_loop()
        counted = False
        while not self._stopping.is_set():
            closed_until = self._budget_closed.get(workspace, 0.0)
            if loop.time() < closed_until:
                await self._sleep(closed_until - loop.time())
                continue
            try:
                left_s = await self._budget.take(workspace, per_minute)
            except Exception as exc:
                log.warning("the per-minute budget could not be read; the turn goes on",
                            extra={"error": type(exc).__name__})
                return counted
            if random.random() < 0.001:  # the counts of minutes long gone, now and then
                self._spawn_side(self._prune_budget())
            if left_s is None:
                return counted
            if not counted:
                counted = True
                metrics.child(metrics.PLAN_MINUTE_WAITS, label).inc()
            # A little past the minute's end, so the next ask falls in the next minute.
            self._budget_closed[workspace] = loop.time() + left_s + 0.05
            if len(self._budget_closed) > 4096:
                now = loop.time()
                self._budget_closed = {w: t for w, t in self._budget_closed.items() if t > now}
        return counted

    def _note_backoff(self, error: BaseException | None) -> None:
        """A rate-limit answer starts (or lengthens) the provider's shared back-off."""
        loop = asyncio.get_running_loop()
        seconds = self._backoff.note(error, loop.time())
        if seconds is None:
            return
        metrics.MODEL_BACKOFFS.inc()
        metrics.MODEL_BACKOFF_ACTIVE.set(1)
        log.warning("the model provider asked to slow down; every turn waits",
                    extra={"delay_s": round(seconds, 3)})
        if self._backoff_timer is not None:
            self._backoff_timer.cancel()
        self._backoff_timer = loop.call_later(seconds, metrics.MODEL_BACKOFF_ACTIVE.set, 0)

    async def _provider_backoff(self) -> None:
        """Wait out the provider's shared back-off before taking a slot (the turn holds none)."""
        loop = asyncio.get_running_loop()
        while (left := self._backoff.remaining(loop.time())) > 0:
            if not await self._sleep(left):
                return

    async def _prune_budget(self) -> None:
        assert self._budget is not None
        with contextlib.suppress(Exception):
            await self._budget.prune()

    @contextlib.contextmanager
    def _busy_on(self, tp: TopicPartition) -> Iterator[None]:
        """Counts work on ``tp`` for a revoke to wait for (a plain context manager: entering
        it never waits, so it costs no await in every turn)."""
        self._busy[tp] += 1
        try:
            yield
        finally:
            self._busy[tp] -= 1
            self._busy_changed.set()

    def _spawn_side(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)
        task.add_done_callback(_log_crash)

    # -- offsets and ownership --------------------------------------------------------------

    async def _commit(self, partitions: set[TopicPartition], *, until_stop: bool = False) -> None:
        """Commit the done offsets of ``partitions``, waiting a bounded time.

        aiokafka's commit retries a broker error and waits for the group coordinator with no
        limit while the consumer is open, so a coordinator out of reach would hold the fetch
        loop, a revoke and the shutdown (which closes the consumer only after this). A commit
        is therefore given up after ``session_timeout_ms`` (a coordinator out of reach that
        long has moved the partitions anyway; a revoke's drain and commit fit in the rebalance
        timeout, ``session_timeout_ms + drain_timeout_ms``), after
        ``_FINAL_COMMIT_TIMEOUT_S`` once the service is stopping and, with ``until_stop``, as
        soon as ``stop()`` is called. Given up, it is a failed commit: the offsets stay marked
        and the next commit includes them; only done offsets are ever sent, so a commit that
        lands late (aiokafka shields the request in flight) or never only means replays.
        """
        consumer = self._consumer
        if consumer is None:
            return
        offsets: dict[TopicPartition, int] = {}
        for tp in partitions:
            mark = self._lookahead.committable(tp)
            if mark is not None and mark > self._committed.get(tp, -1):
                offsets[tp] = mark
        if not offsets:
            return
        crash.reached("before_commit")
        stopping = self._stopping.is_set()
        within_s = self._settings.session_timeout_ms / 1000
        if stopping:
            within_s = min(within_s, _FINAL_COMMIT_TIMEOUT_S)
        try:
            made = await self._bounded(
                consumer.commit(offsets), within_s, until_stop=until_stop and not stopping
            )
        except KafkaError as exc:
            # A rebalance in progress refuses commits; the revoke path commits again.
            log.warning("offset commit failed", extra={"error": type(exc).__name__})
            return
        if not made:
            log.warning(
                "offset commit given up; the offsets are committed later",
                extra={"timeout_s": within_s, "stopping": self._stopping.is_set()},
            )
            return
        self._committed.update(offsets)

    async def _bounded(self, work: Awaitable[None], within_s: float, *, until_stop: bool) -> bool:
        """Await ``work`` for at most ``within_s`` (and, with ``until_stop``, only until
        ``stop()``); False when it was given up, and then it has been cancelled. Its own
        errors are raised; a cancellation of the caller still propagates."""
        task = asyncio.ensure_future(work)
        waiters: set[asyncio.Future[Any]] = {task}
        stopped = asyncio.ensure_future(self._stopping.wait()) if until_stop else None
        if stopped is not None:
            waiters.add(stopped)
        try:
            await asyncio.wait(waiters, timeout=within_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if stopped is not None:
                stopped.cancel()
            if not task.done():
                task.cancel()
                await asyncio.wait([task])
        if task.cancelled():
            return False
        task.result()
        return True

    def _observe_lag(self, consumer: AIOKafkaConsumer) -> None:
        """Lag of every owned partition, quiet ones included: from the offset this consumer
        committed, else from where it started fetching after the assignment."""
        for tp in self._epochs:
            end = consumer.highwater(tp)
            mark = self._committed.get(tp, self._starts.get(tp))
            if end is not None and mark is not None:
                metrics.CONSUMER_LAG.labels(topic=tp.topic, partition=str(tp.partition)).set(
                    max(0, end - mark)
                )

    def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        for tp in assigned:
            self._epoch_counter += 1
            self._epochs[tp] = self._epoch_counter
            self._marks.forget([tp])
            self._refused.forget([tp])
            self._committed.pop(tp, None)
            self._starts.pop(tp, None)
            if self._consumer is not None:
                self._spawn_side(self._note_start(self._consumer, tp, self._epoch_counter))
        # A new assignment starts unpaused in the client; the next round pauses it if needed.
        self._backpressure.forget(assigned)
        self._lookahead.passing.forget(assigned)
        log.info(
            "partitions assigned",
            extra={"partitions": sorted(tp.partition for tp in assigned)},
        )

    async def _note_start(self, consumer: AIOKafkaConsumer, tp: TopicPartition, epoch: int) -> None:
        """Remember where fetching starts on a new assignment, the lag's base until the first
        commit (a quiet partition may never have one)."""
        with contextlib.suppress(KafkaError):  # IllegalStateError: no longer assigned
            position = await consumer.position(tp)
            if self._owns(tp, epoch):
                self._starts[tp] = position

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        owned = revoked & set(self._epochs)
        if not owned:
            return
        if self._membership_lost():
            # The group already gave these partitions away: fence at once, no drain, no commit.
            await self._release(owned, reason="lost", drain=False)
        else:
            await self._release(owned, reason="revoked")

    def _membership_lost(self) -> bool:
        """True when the group coordinator no longer knows this member (a session timeout).

        aiokafka resets the member's generation to -1 when a heartbeat, join or sync is
        answered with an unknown member or an illegal generation; it exposes no public flag,
        hence the attribute read. Any other shape reads as "not lost" (the safe drain path
        still fences at its end).
        """
        coordinator = getattr(self._consumer, "_coordinator", None)
        return getattr(coordinator, "generation", None) == -1

    async def _release(
        self, partitions: set[TopicPartition], *, reason: str, drain: bool = True
    ) -> None:
        """Stop new work on the partitions, drain, commit what is done, end their epochs."""
        self._queues.drop_partitions(partitions)
        if drain:
            await self._drain(partitions, within_s=self._settings.drain_timeout_ms / 1000)
            await self._commit(partitions)
        abandoned = sum(self._busy[tp] for tp in partitions)
        for tp in partitions:
            self._epochs.pop(tp, None)
            self._committed.pop(tp, None)
            self._starts.pop(tp, None)
            with contextlib.suppress(KeyError):
                metrics.CONSUMER_LAG.remove(tp.topic, str(tp.partition))
        self._marks.forget(partitions)
        self._backpressure.forget(partitions)
        self._lookahead.passing.forget(partitions)
        if self._pipeline is not None:
            self._pipeline.forget_partitions({(tp.topic, tp.partition) for tp in partitions})
        log.info(
            "partitions released",
            extra={"reason": reason, "partitions": sorted(tp.partition for tp in partitions),
                   "abandoned": abandoned},
        )

    async def _drain(self, partitions: set[TopicPartition], *, within_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while any(self._busy[tp] for tp in partitions):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self._busy_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._busy_changed.wait(), timeout=remaining)

    @staticmethod
    async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
