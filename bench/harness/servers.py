"""The servers a benchmark run talks to: a scratch database (``bench.harness.databases``) and
a broker, the embedded Tansu broker, ``KAFKA_BOOTSTRAP_SERVERS``, or one Apache Kafka node on
this host. Each is stopped when the caller's ``ExitStack`` closes."""

from __future__ import annotations

import os
from contextlib import ExitStack
from dataclasses import dataclass

from bench.harness.databases import scratch_database

__all__ = ["Servers", "broker_servers", "start_servers"]


@dataclass
class Servers:
    database_url: str  # the scratch database
    bootstrap: str
    where: str
    embedded_broker: bool


def start_servers(
    stack: ExitStack, *, prefix: str = "turnflow-e2e", broker: str = "tansu"
) -> Servers:
    """A scratch database (its name starting with ``prefix``) and the broker at
    ``KAFKA_BOOTSTRAP_SERVERS``, else ``broker`` started for the run (see ``broker_servers``)."""
    database = scratch_database(stack, prefix=prefix)
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if bootstrap:
        return Servers(database.url, bootstrap, f"{database.where} + KAFKA_BOOTSTRAP_SERVERS",
                       False)
    return broker_servers(stack, database.url, database.where, broker)


def broker_servers(stack: ExitStack, database_url: str, where: str, broker: str) -> Servers:
    """``tansu``: the embedded broker; ``kafka``: one Apache Kafka node (KRaft) on this host,
    its JVM sized for throughput rather than for the tests."""
    if broker == "tansu":
        from consumer.devchat.embedded_broker import EmbeddedBroker

        tansu = EmbeddedBroker().start()
        stack.callback(tansu.stop)
        return Servers(database_url, tansu.bootstrap_servers, f"{where} + Tansu (embedded)", True)
    if broker == "kafka":
        from tests.fixtures.kafka_server import KAFKA_VERSION, KafkaServer

        kafka = KafkaServer(jvm_options=("-Xms1g", "-Xmx1g", "-XX:+UseG1GC",
                                         "-Djava.awt.headless=true")).start()
        stack.callback(kafka.stop)
        return Servers(database_url, kafka.bootstrap_servers,
                       f"{where} + Apache Kafka {KAFKA_VERSION}", False)
    raise SystemExit(f"unknown broker {broker!r} (tansu, kafka)")
