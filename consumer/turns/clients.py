"""Opening and closing what the consume service runs on, in the order each needs the other.

Opened: the health server (metrics, readiness) first, so a probe answers while the rest
connects; the store, the producer and what publishes through it (outbox, DLQ); the agent, with
its model calls observed, its knowledge index and its recording; the pipeline; the outbox relay;
the group consumer last, so no partition is assigned before the turns can run; then the round
trips that readiness needs. Closed, after the partitions are released and the workers stopped:
the relay, the pipeline's grouped statements and the publisher while the pool is open, the
producer, the store (when the service opened it) and the health server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

from consumer import metrics
from consumer.closing import close_quietly
from consumer.dead_letters import DeadLetterPublisher
from consumer.health import start_health_server
from consumer.hosting.routing import registry_router
from consumer.model_calls import observe_model_calls
from consumer.outbox import OutboxPublisher, new_producer, start_producer
from consumer.relay import OutboxRelay
from consumer.round_trips import RoundTrips, broker_probe, database_probe
from consumer.settings import Settings
from consumer.turns.knowledge import attach_postgres_knowledge
from consumer.turns.pipeline import OutboundTopics, TurnAgent, TurnPipeline
from consumer.turns.positions import SourcePositions
from consumer.turns.runtime import Runtime
from engine import Agent
from engine.recording import recorded_agent
from store import Store
from store.model_budget import ModelBudget

__all__ = ["close_runtime", "open_runtime"]


def _agent_name(agent: Any) -> str:
    if agent is None:
        return "registry"
    name = getattr(agent, "name", None)
    return name if isinstance(name, str) else type(agent).__name__


async def open_runtime(
    runtime: Runtime,
    settings: Settings,
    agent: TurnAgent | None,
    *,
    client_id: str,
    metrics_exports: tuple[str, ...],
    run_relay: bool,
    budgeted: bool,
    ready: Callable[[], bool],
    listener: ConsumerRebalanceListener,
) -> None:
    """Open every client into ``runtime`` and join the group with ``listener``."""
    s = settings
    bootstrap = s.kafka_bootstrap_servers
    assert bootstrap is not None
    options = s.kafka_client_options()
    runtime.health = await start_health_server(s, ready=ready, exports=metrics_exports)
    metrics.set_build_info("consume", agent=_agent_name(agent))
    metrics.precreate_topics((s.messages_topic, s.schedule_topic))
    if runtime.store is None:
        assert s.database_url is not None
        # No overflow: a connection opened for a burst and closed after it costs the
        # server a backend and the client a handshake and fresh prepared statements; a
        # turn waiting a moment for a pooled one costs neither.
        runtime.store = await Store.connect(
            s.database_url, pool_size=min(s.max_in_flight, 20), max_overflow=0,
            guard_timeline=True, pooler=s.database_pooler,
        )
    store = runtime.store
    metrics.watch_database(store)
    runtime.positions = SourcePositions(
        store, s.group_id, read_within_s=s.session_timeout_ms / 1000
    )
    producer = runtime.producer = new_producer(
        bootstrap,
        idempotent=s.kafka_idempotent_producer,
        client_id=client_id,
        **options,
    )
    await start_producer(producer, idempotent=s.kafka_idempotent_producer)
    publisher = runtime.publisher = OutboxPublisher(store, producer)
    if budgeted:
        runtime.budget = ModelBudget(store.engine)
    runtime.dead_letters = DeadLetterPublisher(producer, store, s.dlq_topic)
    if agent is not None:
        observe_model_calls(agent)
        agent = await attach_postgres_knowledge(
            agent, s.database_url, pooler=s.database_pooler
        )
        if isinstance(agent, Agent):
            agent = recorded_agent(agent)
    # AGENT_REGISTRY: the registry's agents, by each record's agent_id (routing.py).
    router = registry_router(s, store, agent) if s.agent_registry else None
    runtime.pipeline = TurnPipeline(
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
        relay = runtime.relay = OutboxRelay(
            publisher,
            store,
            interval_s=s.relay_interval_ms / 1000,
            grace_s=s.relay_grace_ms / 1000,
            recording_retention=s.recording_retention(),
            outbox_retention=s.outbox_retention(),
            dead_letter_retention=s.dead_letter_retention(),
            turn_retention=s.turn_retention(),
        )
        runtime.relay_task = asyncio.create_task(relay.run(), name="outbox-relay")
    consumer = runtime.consumer = AIOKafkaConsumer(
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
    consumer.subscribe([s.inbound_topic], listener=listener)
    await consumer.start()
    runtime.round_trips = RoundTrips({
        "broker": broker_probe(producer.client),
        "database": database_probe(store.engine),
    })
    await runtime.round_trips.check_once()
    runtime.round_trips.start()


async def close_runtime(runtime: Runtime) -> None:
    """Close what ``open_runtime`` opened after the group consumer (closed by the caller,
    once the partitions are released and the workers stopped)."""
    if runtime.relay is not None and runtime.relay_task is not None:
        runtime.relay.stop()
        await asyncio.gather(runtime.relay_task, return_exceptions=True)
    # A grouped statement outlives the turns that were waiting for it; end it while the
    # pool is open, or the connection it holds is never closed.
    if runtime.pipeline is not None:
        await runtime.pipeline.close()
    if runtime.publisher is not None:
        await runtime.publisher.close()
    if runtime.producer is not None:
        await close_quietly(runtime.producer.stop(), "the producer")
        runtime.producer = None
    if runtime.store is not None and runtime.owns_store:
        await runtime.store.close()
    if runtime.health is not None:
        await runtime.health.stop()
