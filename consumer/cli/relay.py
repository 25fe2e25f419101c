"""``turnflow relay``: the outbox relay alone, republishing rows left unpublished."""

from __future__ import annotations

import argparse
import asyncio
import logging

from consumer import heap, metrics, tracing
from consumer.cli.running import EXIT_CONFIG, fail, run_service
from consumer.closing import close_quietly
from consumer.health import start_health_server
from consumer.logs import configure_logging
from consumer.outbox import OutboxPublisher, new_producer, start_producer
from consumer.relay import OutboxRelay
from consumer.round_trips import RoundTrips, broker_probe, database_probe
from consumer.settings import Settings
from store import Store

__all__ = ["add_arguments", "run"]

log = logging.getLogger("turnflow.relay")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--grace-ms", type=int, default=None,
        help="leave rows younger than this to their consumer (default: $RELAY_GRACE_MS)",
    )


def run(args: argparse.Namespace) -> int:
    settings = Settings()
    configure_logging(settings.log_level)
    if not settings.kafka_bootstrap_servers or not settings.database_url:
        return fail("DATABASE_URL and KAFKA_BOOTSTRAP_SERVERS must be set", EXIT_CONFIG)
    grace_ms = args.grace_ms if args.grace_ms is not None else settings.relay_grace_ms
    # On, the rows go out with the trace context stored with them (consumer.outbox).
    if (tracing_problem := tracing.start()) is not None:
        return fail(tracing_problem, EXIT_CONFIG)
    stopping = asyncio.Event()

    async def serve() -> None:
        assert settings.database_url is not None and settings.kafka_bootstrap_servers
        ready = False
        trips: RoundTrips | None = None

        def is_ready() -> bool:
            # Running, and the broker and the database answered just now.
            return ready and trips is not None and trips.fresh()

        health = await start_health_server(settings, ready=is_ready, process="relay")
        metrics.set_build_info("relay")
        metrics.precreate_topics((settings.messages_topic, settings.schedule_topic))
        store = await Store.connect(
            settings.database_url, pool_size=2, pooler=settings.database_pooler
        )
        producer = new_producer(
            settings.kafka_bootstrap_servers,
            idempotent=settings.kafka_idempotent_producer,
            client_id="turnflow-relay",
            **settings.kafka_client_options(),
        )
        try:
            await start_producer(producer, idempotent=settings.kafka_idempotent_producer)
            relay = OutboxRelay(
                OutboxPublisher(store, producer),
                store,
                interval_s=settings.relay_interval_ms / 1000,
                grace_s=grace_ms / 1000,
                recording_retention=settings.recording_retention(),
                outbox_retention=settings.outbox_retention(),
                dead_letter_retention=settings.dead_letter_retention(),
                turn_retention=settings.turn_retention(),
                turn_partition=settings.turn_partition,
            )
            task = asyncio.create_task(relay.run())
            trips = RoundTrips({"broker": broker_probe(producer.client),
                                "database": database_probe(store.engine)})
            await trips.check_once()
            trips.start()
            ready = True
            log.info("relay ready")
            await stopping.wait()
            relay.stop()
            await task
        finally:
            if trips is not None:
                await trips.stop()
            await close_quietly(producer.stop(), "the producer")
            await store.close()
            if health is not None:
                await health.stop()
            log.info("relay stopped")

    heap.settle()
    return run_service(serve, stopping.set)
