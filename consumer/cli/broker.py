"""``turnflow broker``: the embedded broker on its own, for a production-style trial on one
machine (``topics``, ``migrate``, ``consume``, ``schedule`` as separate processes) without a
Kafka installation. Everything it holds is in memory and gone when it stops; production runs a
real Kafka.
"""

from __future__ import annotations

import argparse
import asyncio

from consumer.cli.running import EXIT_CONFIG, fail, run_service
from consumer.devchat.embedded_broker import EmbeddedBroker
from consumer.errors import EmbeddedBrokerError

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=9092, help="port to listen on (default 9092)")


def run(args: argparse.Namespace) -> int:
    broker = EmbeddedBroker(args.port, host=args.host)
    try:
        broker.start()
    except EmbeddedBrokerError as exc:
        return fail(f"{exc} (is port {args.port} free?)", EXIT_CONFIG)
    print(
        f"turnflow: embedded broker on {broker.bootstrap_servers}, in memory (gone when it "
        "stops). In the other processes' environment set:\n"
        f"  KAFKA_BOOTSTRAP_SERVERS={broker.bootstrap_servers}\n"
        "  KAFKA_IDEMPOTENT_PRODUCER=false   # it hands out no producer ids\n"
        "  KAFKA_FETCH_MAX_WAIT_MS=10        # it holds an empty fetch for the whole wait\n"
        "Ctrl-C or SIGTERM stops it.",
        flush=True,
    )
    stopping = asyncio.Event()

    async def serve() -> None:
        await stopping.wait()

    try:
        return run_service(serve, stopping.set)
    finally:
        broker.stop()
