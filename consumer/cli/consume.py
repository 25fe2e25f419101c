"""``turnflow consume``: the consumer service (and its outbox relay) until SIGTERM.

With ``--workers N`` (or ``CONSUME_WORKERS``) above 1 it runs N consumer processes under a
supervisor (``consumer.turns.supervisor``): one per core fills a machine. With 1 it is the consumer
itself, in this process.
"""

from __future__ import annotations

import argparse
import os

from consumer import heap, tracing
from consumer.agents import load_agent
from consumer.cli.running import EXIT_CONFIG, fail, run_service
from consumer.errors import AgentImportError
from consumer.hosting.packs import load_packs
from consumer.logs import configure_logging
from consumer.settings import Settings
from consumer.turns.service import ConsumerService
from consumer.turns.supervisor import (
    WorkerSupervisor,
    available_cores,
    worker_command,
    worker_environment,
)

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agent", help="module:attribute of the agent (default: $AGENT)")
    parser.add_argument(
        "--no-relay", action="store_true", help="do not run the outbox relay in this process"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="consumer processes to run and keep alive (default: $CONSUME_WORKERS, or one per "
        "available core)",
    )


def run(args: argparse.Namespace) -> int:
    settings = Settings()
    configure_logging(settings.log_level)
    agent_path = args.agent or settings.agent
    if not agent_path and not settings.agent_registry:
        return fail(
            "no agent: pass --agent module:attribute, set AGENT, or set AGENT_REGISTRY=true",
            EXIT_CONFIG,
        )
    if not settings.kafka_bootstrap_servers:
        return fail("KAFKA_BOOTSTRAP_SERVERS is not set", EXIT_CONFIG)
    if not settings.database_url:
        return fail("DATABASE_URL is not set", EXIT_CONFIG)
    workers = args.workers if args.workers is not None else settings.consume_workers
    if workers < 0:
        return fail("--workers must be 0 (one per core) or more", EXIT_CONFIG)
    workers = workers or available_cores()
    if (tracing_problem := tracing.start()) is not None:
        return fail(tracing_problem, EXIT_CONFIG)
    try:
        # Checked here too, so a bad agent or pack fails once, not once per worker.
        agent = load_agent(agent_path) if agent_path else None
        if settings.agent_registry:
            load_packs(settings.packs)
    except AgentImportError as exc:
        return fail(str(exc), EXIT_CONFIG)
    if workers > 1:
        # Workers that cannot reach a server would only be restarted, again and again: say so
        # once, as one consumer would, before starting any.
        code = run_service(lambda: _preflight(settings, workers), lambda: None)
        if code != 0:
            return code
        return _supervise(
            workers, agent_path, relay=not args.no_relay,
            first_port=settings.metrics_port_for("consume"),
        )
    while True:
        service = ConsumerService(settings, agent, run_relay=not args.no_relay)
        heap.settle()  # start-up is done: what it built lives as long as the process
        code = run_service(service.run, service.stop)
        if not service.restart_wanted:
            return code
        # The database failed over under it: a fresh service reads the positions the promoted
        # database holds and runs again whatever inputs the failover lost.


async def _preflight(settings: Settings, workers: int) -> None:
    """Connect once to PostgreSQL and the broker (with the producer the workers will use) and
    check the workers' metrics ports are free; raises what ``run_service`` reports."""
    from consumer.health import free_metrics_port
    from consumer.outbox import new_producer, start_producer
    from store import Store

    assert settings.database_url is not None and settings.kafka_bootstrap_servers is not None
    first = settings.metrics_port_for("consume")
    for index in range(workers if first else 0):  # the ports worker_environment hands out
        await free_metrics_port(settings, first + index)
    store = await Store.connect(
        settings.database_url, pool_size=1, max_overflow=0, pooler=settings.database_pooler
    )
    await store.close()
    producer = new_producer(
        settings.kafka_bootstrap_servers,
        idempotent=settings.kafka_idempotent_producer,
        **settings.kafka_client_options(),
    )
    try:
        await start_producer(producer, idempotent=settings.kafka_idempotent_producer)
    finally:
        await producer.stop()


def _supervise(
    workers: int, agent_path: str | None, *, relay: bool, first_port: int
) -> int:
    supervisor = WorkerSupervisor(
        workers,
        command=lambda i: worker_command(i, agent=agent_path, relay=relay),
        environment=lambda i: worker_environment(i, dict(os.environ), first_port=first_port),
    )
    return run_service(supervisor.run, supervisor.stop)
