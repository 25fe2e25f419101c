"""The scheduler service: durable timers become wake inputs on ``inbound.turns``.

Two loops share one process. ``ScheduleIntake`` (``consumer.scheduler.intake``) stores
``outbound.schedule`` entries; ``TimerFiring`` fires the due ones. Firing, per batch:

1. claim due rows (``at <= now()`` by the database's clock) with ``FOR UPDATE SKIP LOCKED``,
   inside a transaction that stays open;
2. produce ``{"session_id", "wake": key}`` to ``inbound.turns`` keyed by session id and await
   every ack;
3. delete the rows whose wakes were acknowledged (and those set aside, below) and commit;
4. if any wake failed for a reason a retry may fix, raise: its row stays and is claimed again.

A batch holds up to ``batch_size`` timers of many sessions and partitions. Were one failed ack
to keep the whole batch, one unavailable partition would have every healthy wake of the batch
produced again on each retry, and the earliest due timers of every session waiting for it.
Deleting what was acknowledged changes no order: those wakes are on the topic already.

Up to ``FiringOptions.pipeline`` batches are in flight at once: the next one claims while the
previous one sends and awaits its acks, but sends only after the previous one has handed all
its records to the producer, which keeps wakes in due order per partition.

A timer whose wake can never be produced (``consumer.failures``: a key so long the wake is
over the producer's size limit) would fail its batch on every attempt, and since due rows are
claimed earliest first it would hold back every timer due after it. Such a timer is set aside:
kept in the ``dead_letters`` table (source ``timer:<sha256 of its session and key>``), logged
and counted in ``turnflow_schedule_refused_total``, and deleted with its batch while the
others fire.

With tracing on, each wake is sent inside a PRODUCER span ``send inbound.turns`` that starts a
trace of its own, linked to the context stored with the timer (the turn that set it), and the
wake record carries that span's context, so the wake's turn is its child: one trace per turn,
and a follow-up's trace leads back to the turn that scheduled it. Tracing off, a wake costs
one check more.

Replicas skip each other's locked rows, so in the normal path a timer fires once. A crash
between the ack and the commit fires it again on restart; the engine answers that second wake
with ``stale-wake``. Nothing ever deletes a row whose wake was not acknowledged, so a timer is
never lost.

Between batches the firing loop sleeps until the next due time (asked of the database, so both
clocks agree), or until intake stores something new, whichever comes first; ``max_idle`` caps
the sleep so rows stored by another replica are noticed even if that replica dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from consumer import metrics, tracing
from consumer.closing import close_quietly
from consumer.dead_letters import keep_unsendable
from consumer.failures import cannot_succeed
from consumer.health import HealthServer, start_health_server
from consumer.outbox import encode_payload, new_producer, start_producer
from consumer.round_trips import RoundTrips, broker_probe, database_probe
from consumer.scheduler.intake import ScheduleIntake, TimerSink
from consumer.settings import Settings
from store import DeadLetterRecord, Store, Timer

__all__ = [
    "FiringOptions",
    "Scheduler",
    "SchedulerService",
    "TimerClaim",
    "TimerFiring",
    "TimerStore",
    "build_scheduler",
    "wake_record",
]

log = logging.getLogger("turnflow.scheduler")


class TimerClaim(Protocol):
    """Due rows locked by an open transaction; leaving the context commits or rolls back."""

    @property
    def timers(self) -> Sequence[Timer]: ...
    @property
    def db_now(self) -> datetime: ...
    async def delete(self, ids: Sequence[tuple[str, str]] | None = None) -> int: ...


class TimerStore(TimerSink, Protocol):
    """What the scheduler needs of ``store.Store``: upsert, claim, next due, pending count,
    and keeping a timer that can never fire."""

    def claim_due(self, limit: int) -> AbstractAsyncContextManager[TimerClaim]: ...
    async def next_due_in(self) -> float | None: ...
    async def timers_pending(self) -> int: ...
    async def keep_dead_letter(self, letter: DeadLetterRecord) -> int: ...


def wake_record(timer: Timer) -> tuple[bytes, bytes]:
    """The ``inbound.turns`` key and value that wake ``timer``'s session."""
    value = encode_payload({"session_id": timer.session_id, "wake": timer.key})
    return timer.session_id.encode(), value


@dataclass(frozen=True)
class FiringOptions:
    """How the firing loop batches and sleeps (seconds).

    ``pipeline`` batches may be in flight at once, so database round trips overlap with the
    broker's; wakes still leave in due order per partition (see ``TimerFiring.fire_due``).
    """

    batch_size: int = 1000
    pipeline: int = 2
    max_idle: float = 5.0
    min_sleep: float = 0.005
    retry_delay: float = 1.0
    pending_refresh: float = 1.0
    contended_sleep: float = 0.01
    contended_max: float = 1.0


class TimerFiring:
    """Fires due timers in batches; see the module docstring for the order of operations."""

    def __init__(
        self,
        *,
        store: TimerStore,
        producer: AIOKafkaProducer,
        topic: str,
        options: FiringOptions | None = None,
    ) -> None:
        self._store = store
        self._producer = producer
        self._topic = topic
        self._options = options or FiringOptions()
        self._poke = asyncio.Event()
        self._pending_at = -float("inf")
        self._contended = 0.0
        self.healthy = False

    def poke(self) -> None:
        """Something new was stored: recompute the sleep instead of finishing the old one."""
        self._poke.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Fire and sleep until ``stop`` is set; errors are logged and retried, never fatal."""
        while not stop.is_set():
            # Cleared before looking, so a poke that lands while we look cuts the sleep short.
            self._poke.clear()
            try:
                sleep_for = await self.step(stop)
                self.healthy = True
            except asyncio.CancelledError:
                raise
            except Exception:
                self.healthy = False
                log.exception("firing timers failed; retrying")
                sleep_for = self._options.retry_delay
            if sleep_for > 0:
                await self._sleep(stop, sleep_for)

    async def step(self, stop: asyncio.Event | None = None) -> float:
        """Fire every due timer now, then return how long to sleep before looking again."""
        fired = await self.fire_due(stop)
        # count(*) reads every pending timer: once per `pending_refresh` at most, never once per
        # firing (timers falling due steadily would count the whole table many times a second).
        if time.monotonic() - self._pending_at >= self._options.pending_refresh:
            metrics.TIMERS_PENDING.set(await self._store.timers_pending())
            self._pending_at = time.monotonic()
        due_in = await self._store.next_due_in()
        options = self._options
        if due_in is not None and due_in <= 0 and not fired:
            # Due rows we could not claim are locked by another replica, which fires them.
            # Back off instead of spinning, but look again soon: its locks die with it.
            self._contended = min(
                max(self._contended * 2, options.contended_sleep), options.contended_max
            )
            return self._contended
        self._contended = 0.0
        if due_in is None:
            return options.max_idle
        return min(max(due_in, options.min_sleep), options.max_idle)

    async def fire_due(self, stop: asyncio.Event | None = None) -> int:
        """Fire batches until one comes back short or ``stop`` is set; returns how many fired.

        The next batch is claimed as soon as the previous one's claim returns, but sends only
        after the previous one has handed all its records to the producer, so wakes leave in
        due order. A failed batch (its acknowledged rows deleted, the failed ones kept) stops
        new claims; batches already claimed still finish (their rows are deleted only on their
        own acks), then the first error is raised.
        """
        loop = asyncio.get_running_loop()
        batches: list[asyncio.Task[int]] = []
        previous_sent: asyncio.Future[None] | None = None
        try:
            while True:
                claimed: asyncio.Future[int] = loop.create_future()
                sent: asyncio.Future[None] = loop.create_future()
                batch = asyncio.create_task(
                    self.fire_batch(claimed=claimed, after=previous_sent, sent=sent)
                )
                batches.append(batch)
                previous_sent = sent
                await asyncio.wait([batch, claimed], return_when=asyncio.FIRST_COMPLETED)
                if not claimed.done() or claimed.result() < self._options.batch_size:
                    break
                if stop is not None and stop.is_set():
                    break  # a long backlog must not hold up a shutdown; the rest stays stored
                in_flight = [b for b in batches if not b.done()]
                if len(in_flight) >= self._options.pipeline:
                    await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                if any(b.done() and b.exception() is not None for b in batches):
                    break
        finally:
            outcomes = await asyncio.gather(*batches, return_exceptions=True)
        fired = 0
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
            fired += outcome
        return fired

    async def fire_batch(
        self,
        *,
        claimed: asyncio.Future[int] | None = None,
        after: asyncio.Future[None] | None = None,
        sent: asyncio.Future[None] | None = None,
    ) -> int:
        """Claim up to ``batch_size`` due rows, produce their wakes, delete them; return count.

        When some acks fail for a reason a retry may fix, the rows acknowledged or set aside
        are still deleted and committed, then the first such failure is raised.

        ``claimed`` resolves to the number of rows claimed; sending waits for ``after`` (the
        previous batch's ``sent``); ``sent`` resolves once every record is with the producer,
        or once this batch gave up, so a failure never stalls the batch behind it.
        """
        try:
            async with self._store.claim_due(self._options.batch_size) as claim:
                timers = list(claim.timers)
                if claimed is not None:
                    claimed.set_result(len(timers))
                if not timers:
                    return 0
                claimed_at = time.monotonic()
                if after is not None:
                    await after
                acks: list[tuple[Timer, asyncio.Future[Any]]] = []
                spans: list[tracing.SendSpan | None] = []
                refused: list[tuple[Timer, BaseException]] = []
                for timer in timers:
                    key, value = wake_record(timer)
                    span = self._wake_span(timer)
                    try:
                        if span is None:
                            ack = await self._producer.send(self._topic, value, key=key)
                        else:
                            ack = await self._producer.send(
                                self._topic, value, key=key, headers=span.headers
                            )
                    except Exception as exc:
                        if span is not None:
                            span.end(exc)
                        if cannot_succeed(exc) is None:
                            _end_all(spans, exc)
                            raise
                        refused.append((timer, exc))
                        continue
                    acks.append((timer, ack))
                    spans.append(span)
                if sent is not None:
                    sent.set_result(None)
                # Every ack before any delete: a row is gone only once its wake is durable.
                # All acks are awaited even after a failure, so none is left unretrieved.
                outcomes = await asyncio.gather(*(a for _, a in acks), return_exceptions=True)
                fired: list[Timer] = []
                failed: BaseException | None = None
                for (timer, _), span, outcome in zip(acks, spans, outcomes, strict=True):
                    if span is not None:
                        span.end(outcome if isinstance(outcome, BaseException) else None)
                    if not isinstance(outcome, BaseException):
                        fired.append(timer)
                    elif cannot_succeed(outcome) is not None:
                        refused.append((timer, outcome))
                    elif failed is None:
                        failed = outcome
                for timer, error in refused:
                    await self._set_aside(timer, error)
                if failed is None:
                    await claim.delete()
                else:
                    # The failed rows stay (and are claimed again); the rest commit now, so a
                    # retry does not produce their wakes again.
                    gone = [*fired, *(timer for timer, _ in refused)]
                    await claim.delete([(t.session_id, t.key) for t in gone])
                lateness = [(claim.db_now - t.at).total_seconds() for t in fired]
        finally:
            if sent is not None and not sent.done():
                sent.set_result(None)
        # Fire delay = how late the timer was at claim (database clock) + the time to ack.
        spent = time.monotonic() - claimed_at
        for late in lateness:
            metrics.TIMER_FIRE_DELAY.observe(max(late, 0.0) + spent)
        metrics.WAKES_EMITTED.inc(len(fired))
        log.info("fired timers", extra={"rows": len(fired)})
        if failed is not None:
            raise failed
        return len(timers)

    def _wake_span(self, timer: Timer) -> tracing.SendSpan | None:
        """The wake's PRODUCER span, linked to the turn that set the timer; None (one check)
        while tracing is off."""
        return tracing.wake_span(
            topic=self._topic, session_id=timer.session_id, timer_key=timer.key,
            traceparent=timer.traceparent, tracestate=timer.tracestate,
        )

    async def _set_aside(self, timer: Timer, error: BaseException) -> None:
        """Keep a timer whose wake can never be produced; its row is deleted with the batch."""
        # Keyed by session and key: the same key may be set for two sessions.
        identity = f"{timer.session_id}\n{timer.key}".encode("utf-8", "backslashreplace")
        reason, kept = await keep_unsendable(
            self._store,
            source=f"timer:{hashlib.sha256(identity).hexdigest()}",
            topic=self._topic,
            error=error,
            key=timer.session_id,
            value=wake_record(timer)[1],
        )
        metrics.SCHEDULE_REFUSED.labels(reason=reason).inc()
        log.error(
            "timer can never fire; kept in the dead_letters table",
            extra={"reason": reason, "kept_id": kept, "error": type(error).__name__},
        )

    async def _sleep(self, stop: asyncio.Event, seconds: float) -> None:
        waiters = {
            asyncio.ensure_future(stop.wait()),
            asyncio.ensure_future(self._poke.wait()),
        }
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()


def _end_all(spans: Sequence[tracing.SendSpan | None], error: BaseException) -> None:
    """Close the spans of a batch that gave up before its acks were awaited."""
    for span in spans:
        if span is not None:
            span.end(error)


class Scheduler:
    """Intake and firing in one process; ``run(stop)`` returns after a clean shutdown."""

    def __init__(
        self,
        *,
        intake: ScheduleIntake,
        firing: TimerFiring,
        producer: AIOKafkaProducer,
        idempotent: bool = False,
    ) -> None:
        self.intake = intake
        self.firing = firing
        self._producer = producer
        self._idempotent = idempotent
        self.started = False

    @property
    def producer(self) -> AIOKafkaProducer:
        """The wake producer; its client doubles as the broker probe of ``/readyz``."""
        return self._producer

    @property
    def ready(self) -> bool:
        """Both loops are running and their last round succeeded."""
        return self.started and self.intake.healthy and self.firing.healthy

    async def run(
        self, stop: asyncio.Event, *, on_started: Callable[[], None] | None = None
    ) -> None:
        """Start both clients, run both loops until ``stop`` is set, stop the clients."""
        try:
            await start_producer(self._producer, idempotent=self._idempotent)
            await self.intake.start()
            self.started = True
            if on_started is not None:
                on_started()
            await asyncio.gather(self.intake.run(stop), self.firing.run(stop))
        finally:
            self.started = False
            # Stopped even when starting failed: a client left unclosed leaks its connections.
            await close_quietly(self.intake.stop(), "the schedule intake")
            await close_quietly(self._producer.stop(), "the wake producer")


def build_scheduler(
    store: TimerStore,
    *,
    bootstrap_servers: str,
    schedule_topic: str,
    inbound_topic: str,
    group_id: str,
    client_options: Mapping[str, Any] | None = None,
    consumer_options: Mapping[str, Any] | None = None,
    idempotent: bool = False,
    options: FiringOptions | None = None,
    positions: bool = False,
) -> Scheduler:
    """Wire intake and firing to Kafka clients; ``group_id`` is the schedule topic's group.
    ``positions``: the intake keeps its positions in the database (``store`` is a ``Store``;
    ``consumer.scheduler.positions``).

    Replicas share ``group_id``, so each schedule entry is stored by one of them; firing needs
    no group, since row locks keep replicas apart. ``idempotent`` (off by default: the embedded
    broker has no producer ids) stops a retried send from writing a wake twice.
    """
    kafka = dict(client_options or {})
    producer = new_producer(
        bootstrap_servers, idempotent=idempotent, client_id="turnflow-scheduler", **kafka
    )
    firing = TimerFiring(store=store, producer=producer, topic=inbound_topic, options=options)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        client_id="turnflow-scheduler",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **dict(consumer_options or {}),
        **kafka,
    )
    intake = ScheduleIntake(
        consumer=consumer, topic=schedule_topic, sink=store, on_stored=firing.poke,
        group=group_id if positions else None,
    )
    return Scheduler(intake=intake, firing=firing, producer=producer, idempotent=idempotent)


class SchedulerService:
    """``turnflow schedule``: run until ``stop()``, then close everything cleanly.

    The schedule topic is consumed by the group ``{GROUP_ID}-scheduler``, so it never shares a
    group with the consumer service. ``/readyz`` is 200 while both loops succeed.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store | None = None,
        options: FiringOptions | None = None,
    ) -> None:
        settings.require_servers(database=store is None)
        self._settings = settings
        self._store = store
        self._owns_store = store is None
        self._options = options
        self._stopping = asyncio.Event()
        self._scheduler: Scheduler | None = None
        self._health: HealthServer | None = None
        self._round_trips: RoundTrips | None = None
        self.started = asyncio.Event()

    @property
    def group_id(self) -> str:
        return f"{self._settings.group_id}-scheduler"

    def stop(self) -> None:
        """Ask the service to shut down (safe from a signal handler)."""
        self._stopping.set()

    def ready(self) -> bool:
        """Both loops run, not stopping, and the broker and the database answered just now."""
        scheduler, trips = self._scheduler, self._round_trips
        return (
            scheduler is not None
            and scheduler.ready
            and not self._stopping.is_set()
            and trips is not None
            and trips.fresh()
        )

    @property
    def health_port(self) -> int | None:
        return self._health.port if self._health is not None else None

    def _announce(self) -> None:
        assert self._scheduler is not None and self._store is not None
        self._round_trips = RoundTrips({
            "broker": broker_probe(self._scheduler.producer.client),
            "database": database_probe(self._store.engine),
        })
        # Both clients just connected (the store at connect, the producer at start).
        self._round_trips.record("broker", True)
        self._round_trips.record("database", True)
        self._round_trips.start()
        self.started.set()
        log.info("scheduler ready", extra={"group_id": self.group_id, "port": self.health_port})

    async def run(self) -> None:
        """Connect, fire and store until ``stop()``, then shut down."""
        s = self._settings
        assert s.kafka_bootstrap_servers is not None
        try:
            self._health = await start_health_server(s, ready=self.ready, process="schedule")
            metrics.set_build_info("schedule")
            if self._store is None:
                assert s.database_url is not None
                self._store = await Store.connect(
                    s.database_url,
                    pool_size=4,
                    max_overflow=2,
                    application_name="turnflow-scheduler",
                    pooler=s.database_pooler,
                )
            self._scheduler = build_scheduler(
                self._store,
                bootstrap_servers=s.kafka_bootstrap_servers,
                schedule_topic=s.schedule_topic,
                inbound_topic=s.inbound_topic,
                group_id=self.group_id,
                client_options=s.kafka_client_options(),
                consumer_options={
                    "session_timeout_ms": s.session_timeout_ms,
                    "heartbeat_interval_ms": s.heartbeat_interval_ms,
                },
                idempotent=s.kafka_idempotent_producer,
                options=self._options,
                positions=True,
            )
            await self._scheduler.run(self._stopping, on_started=self._announce)
        finally:
            if self._round_trips is not None:
                await self._round_trips.stop()
            if self._store is not None and self._owns_store:
                with contextlib.suppress(Exception):
                    await self._store.close()
            if self._health is not None:
                await self._health.stop()
            if self.started.is_set():
                log.info("scheduler stopped")
