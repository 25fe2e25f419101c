"""Opening and closing what the consume service runs on, in the order each needs the other.

Opened (``open_clients``): the health server (metrics, readiness) first, so a probe answers
while the rest connects; the store, the producer and what publishes through it (outbox, DLQ);
the agent, with its model calls observed, its knowledge index and its recording; the pipeline;
the outbox relay; the group consumer, made but not yet joined. The service then builds its parts
around those clients and joins the group (``start_consuming``) last, so no partition is assigned
before the turns can run; then the round trips that readiness needs. Closed (``close_opened``),
after the partitions are released and the workers stopped: the relay, the pipeline's grouped
statements and the publisher while the pool is open, the producer, the store (when the service
opened it) and the health server.

``Opened`` holds what the process opened, filled as each opens, so whatever opened before a
failure is closed; the parts only ever see the finished ``Clients``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener

from consumer import metrics
from consumer.closing import close_quietly
from consumer.dead_letters import DeadLetterPublisher
from consumer.health import HealthServer, start_health_server
from consumer.hosting.routing import registry_router
from consumer.model_calls import observe_model_calls
from consumer.outbox import OutboxPublisher, new_producer, start_producer
from consumer.relay import OutboxRelay
from consumer.round_trips import RoundTrips, broker_probe, database_probe
from consumer.settings import Settings
from consumer.turns.knowledge import attach_postgres_knowledge
from consumer.turns.pipeline import OutboundTopics, TurnAgent, TurnPipeline
from consumer.turns.positions import SourcePositions
from consumer.turns.runtime import Clients
from engine import Agent
from engine.recording import recorded_agent
from store import Store
from store.model_budget import ModelBudget

__all__ = ["Opened", "close_opened", "open_clients", "start_consuming"]


@dataclass
class Opened:
    """What ``open_clients`` opened so far (each ``None`` until it is), for ``close_opened``."""

    store: Store | None = None
    owns_store: bool = False  # a store given by the caller is the caller's to close
    health: HealthServer | None = None
    positions: SourcePositions | None = None
    producer: AIOKafkaProducer | None = None
    publisher: OutboxPublisher | None = None
    pipeline: TurnPipeline | None = None
    relay: OutboxRelay | None = None
    relay_task: asyncio.Task[None] | None = None
    round_trips: RoundTrips | None = None
    clients: Clients | None = None  # all of them, once every one is open


def _agent_name(agent: Any) -> str:
    if agent is None:
        return "registry"
    name = getattr(agent, "name", None)
    return name if isinstance(name, str) else type(agent).__name__


async def open_clients(
    opened: Opened,
    settings: Settings,
    agent: TurnAgent | None,
    store: Store | None,
    *,
    client_id: str,
    metrics_exports: tuple[str, ...],
    run_relay: bool,
    ready: Callable[[], bool],
) -> Clients:
    """Open every client into ``opened`` (``store`` when the caller gives one) and return them;
    the group consumer is made, not started (``start_consuming``)."""
    s = settings
    bootstrap = s.kafka_bootstrap_servers
    assert bootstrap is not None
    options = s.kafka_client_options()
    opened.health = await start_health_server(s, ready=ready, exports=metrics_exports)
    metrics.set_build_info("consume", agent=_agent_name(agent))
    metrics.precreate_topics((s.messages_topic, s.schedule_topic))
    if store is None:
        assert s.database_url is not None
        # No overflow: a connection opened for a burst and closed after it costs the
        # server a backend and the client a handshake and fresh prepared statements; a
        # turn waiting a moment for a pooled one costs neither.
        store = await Store.connect(
            s.database_url, pool_size=min(s.max_in_flight, 20), max_overflow=0,
            guard_timeline=True, pooler=s.database_pooler,
        )
        opened.owns_store = True
    opened.store = store
    metrics.watch_database(store)
    positions = opened.positions = SourcePositions(
        store, s.group_id, read_within_s=s.session_timeout_ms / 1000
    )
    producer = opened.producer = new_producer(
        bootstrap,
        idempotent=s.kafka_idempotent_producer,
        client_id=client_id,
        **options,
    )
    await start_producer(producer, idempotent=s.kafka_idempotent_producer)
    publisher = opened.publisher = OutboxPublisher(store, producer)
    # A plan with a per-minute budget: the budget every consumer shares (store.model_budget).
    budget = ModelBudget(store.engine) if s.plan_per_minute_map() else None
    dead_letters = DeadLetterPublisher(producer, store, s.dlq_topic)
    if agent is not None:
        observe_model_calls(agent)
        agent = await attach_postgres_knowledge(
            agent, s.database_url, pooler=s.database_pooler
        )
        if isinstance(agent, Agent):
            agent = recorded_agent(agent)
    # AGENT_REGISTRY: the registry's agents, by each record's agent_id (routing.py).
    router = registry_router(s, store, agent) if s.agent_registry else None
    pipeline = opened.pipeline = TurnPipeline(
        store=store,
        agent=agent,
        publisher=publisher,
        topics=OutboundTopics(messages=s.messages_topic, schedule=s.schedule_topic),
        history_limit=s.history_limit,
        history_cache_sessions=s.history_cache_sessions,
        max_version_conflicts=s.max_version_conflicts,
        recording=s.model_recording,
        router=router,
    )
    if run_relay:
        relay = opened.relay = OutboxRelay(
            publisher,
            store,
            interval_s=s.relay_interval_ms / 1000,
            grace_s=s.relay_grace_ms / 1000,
            recording_retention=s.recording_retention(),
            outbox_retention=s.outbox_retention(),
            dead_letter_retention=s.dead_letter_retention(),
            turn_retention=s.turn_retention(),
        )
        opened.relay_task = asyncio.create_task(relay.run(), name="outbox-relay")
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=s.group_id,
        client_id=client_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=max(s.max_record_bytes * 4, 1 << 20),
        session_timeout_ms=s.session_timeout_ms,
        heartbeat_interval_ms=s.heartbeat_interval_ms,
        rebalance_timeout_ms=s.session_timeout_ms + s.drain_timeout_ms,
        fetch_max_wait_ms=s.kafka_fetch_max_wait_ms,
        **options,
    )
    clients = opened.clients = Clients(
        consumer=consumer, store=store, pipeline=pipeline, dead_letters=dead_letters,
        budget=budget, positions=positions,
    )
    return clients


async def start_consuming(
    opened: Opened, settings: Settings, listener: ConsumerRebalanceListener
) -> None:
    """Join the group with ``listener`` (the parts exist by now), then start the round trips
    that readiness needs."""
    clients, producer = opened.clients, opened.producer
    assert clients is not None and producer is not None, "open_clients first"
    clients.consumer.subscribe([settings.inbound_topic], listener=listener)
    await clients.consumer.start()
    opened.round_trips = RoundTrips({
        "broker": broker_probe(producer.client),
        "database": database_probe(clients.store.engine),
    })
    await opened.round_trips.check_once()
    opened.round_trips.start()


async def close_opened(opened: Opened) -> None:
    """Close what ``open_clients`` opened but the group consumer (closed by the service, once
    the partitions are released and the workers stopped)."""
    if opened.relay is not None and opened.relay_task is not None:
        opened.relay.stop()
        await asyncio.gather(opened.relay_task, return_exceptions=True)
    # A grouped statement outlives the turns that were waiting for it; end it while the
    # pool is open, or the connection it holds is never closed.
    if opened.pipeline is not None:
        await opened.pipeline.close()
    if opened.publisher is not None:
        await opened.publisher.close()
    if opened.producer is not None:
        await close_quietly(opened.producer.stop(), "the producer")
        opened.producer = None
    if opened.positions is not None:
        await opened.positions.close()
    if opened.store is not None and opened.owns_store:
        await opened.store.close()
    if opened.health is not None:
        await opened.health.stop()
