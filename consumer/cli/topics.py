"""``turnflow topics``: create the configured topics (existing ones are left as they are).

Each topic is created with ``TOPIC_PARTITIONS``, ``TOPIC_REPLICATION_FACTOR`` and
``min.insync.replicas`` (``Settings.min_insync_replicas``). A replication factor larger than the
cluster's brokers, or a ``min.insync.replicas`` larger than the replication factor (every write
would be refused), is one line on stderr and exit 2 with nothing created. An existing topic
that differs from the settings is printed with its differences and left as it is (exit 0):
changing partitions moves conversations between partitions, and changing replication is a
reassignment an operator plans.
"""

from __future__ import annotations

import argparse
import asyncio

from consumer.cli.arguments import whole_number
from consumer.cli.running import EXIT_CONFIG, EXIT_UNREACHABLE, fail
from consumer.errors import TopicSetupError
from consumer.settings import Settings
from consumer.topics import TooFewBrokersError, TopicSpec, ensure_topics

__all__ = ["add_arguments", "run", "topic_specs"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--partitions", type=whole_number(1), default=None,
        help="partitions (default: $TOPIC_PARTITIONS)",
    )


def topic_specs(settings: Settings, partitions: int | None = None) -> list[TopicSpec]:
    """The four topics of the service with the configured partitions and replication."""
    count = settings.topic_partitions if partitions is None else partitions
    factor = settings.topic_replication_factor
    # One replica: min.insync.replicas can only be 1, Kafka's default; not set, so a broker that
    # cannot describe topic configs (the embedded one) is never asked.
    insync = (
        settings.min_insync_replicas()
        if factor > 1 or settings.topic_min_insync_replicas is not None
        else None
    )
    names = (
        settings.inbound_topic,
        settings.messages_topic,
        settings.schedule_topic,
        settings.dlq_topic,
    )
    return [TopicSpec(n, count, factor, insync) for n in names]


def run(args: argparse.Namespace) -> int:
    from aiokafka.errors import KafkaError

    settings = Settings()
    if not settings.kafka_bootstrap_servers:
        return fail("KAFKA_BOOTSTRAP_SERVERS is not set", EXIT_CONFIG)
    specs = topic_specs(settings, args.partitions)
    if settings.min_insync_replicas() > settings.topic_replication_factor:
        return fail(
            f"min.insync.replicas {settings.min_insync_replicas()} is more than the replication "
            f"factor {settings.topic_replication_factor}: every write would be refused",
            EXIT_CONFIG,
        )
    try:
        reports = asyncio.run(
            ensure_topics(
                settings.kafka_bootstrap_servers,
                specs,
                client_options=settings.kafka_client_options(),
            )
        )
    except TooFewBrokersError as exc:
        return fail(f"cannot create topics: {exc}", EXIT_CONFIG)
    except (KafkaError, OSError, TopicSetupError) as exc:
        return fail(f"cannot create topics: {type(exc).__name__}: {exc}", EXIT_UNREACHABLE)
    for report, spec in zip(reports, specs, strict=True):
        if report.created:
            insync = (
                f", min.insync.replicas {spec.min_insync_replicas}"
                if spec.min_insync_replicas is not None
                else ""
            )
            print(
                f"topic {report.name}: created with {report.partitions} partitions, "
                f"replication factor {spec.replication_factor}{insync}"
            )
        elif not report.differences:
            print(f"topic {report.name}: found, {report.partitions} partitions")
        else:
            print(
                f"topic {report.name}: found, left as it is though it differs from the "
                f"settings: {'; '.join(report.differences)}"
            )
    return 0
