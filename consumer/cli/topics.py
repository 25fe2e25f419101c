"""``turnflow topics``: create the configured topics (existing ones are left as they are)."""

from __future__ import annotations

import argparse
import asyncio

from consumer.cli.arguments import whole_number
from consumer.cli.running import EXIT_CONFIG, EXIT_UNREACHABLE, fail
from consumer.errors import TopicSetupError
from consumer.settings import Settings
from consumer.topics import TopicSpec, ensure_topics

__all__ = ["add_arguments", "run", "topic_specs"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--partitions", type=whole_number(1), default=None,
        help="partitions (default: $TOPIC_PARTITIONS)",
    )


def topic_specs(settings: Settings, partitions: int | None = None) -> list[TopicSpec]:
    """The four topics of the service with the configured partitions and replication."""
    count = settings.topic_partitions if partitions is None else partitions
    names = (
        settings.inbound_topic,
        settings.messages_topic,
        settings.schedule_topic,
        settings.dlq_topic,
    )
    return [TopicSpec(n, count, settings.topic_replication_factor) for n in names]


def run(args: argparse.Namespace) -> int:
    from aiokafka.errors import KafkaError

    settings = Settings()
    if not settings.kafka_bootstrap_servers:
        return fail("KAFKA_BOOTSTRAP_SERVERS is not set", EXIT_CONFIG)
    specs = topic_specs(settings, args.partitions)
    try:
        reports = asyncio.run(
            ensure_topics(
                settings.kafka_bootstrap_servers,
                specs,
                client_options=settings.kafka_client_options(),
            )
        )
    except (KafkaError, OSError, TopicSetupError) as exc:
        return fail(f"cannot create topics: {type(exc).__name__}: {exc}", EXIT_UNREACHABLE)
    for report, spec in zip(reports, specs, strict=True):
        if report.created:
            print(f"topic {report.name}: created with {report.partitions} partitions")
        elif report.partitions == spec.partitions:
            print(f"topic {report.name}: found, {report.partitions} partitions")
        else:
            print(
                f"topic {report.name}: found, {report.partitions} partitions "
                f"({spec.partitions} requested; an existing topic is never resized)"
            )
    return 0
