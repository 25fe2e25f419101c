"""A fresh set of the consumer's topics for one run, so runs never read each other's records."""

from __future__ import annotations

import uuid

from bench.harness.servers import Servers

__all__ = ["fresh_topics"]


async def fresh_topics(servers: Servers, partitions: int) -> dict[str, str]:
    """The consumer's topic settings (``INBOUND_TOPIC``, ...) for new topics of ``partitions``
    partitions (the dead-letter topic one)."""
    from consumer.topics import TopicSpec, ensure_topics

    suffix = uuid.uuid4().hex[:8]
    names = {
        "INBOUND_TOPIC": f"bench.inbound.{suffix}",
        "MESSAGES_TOPIC": f"bench.messages.{suffix}",
        "SCHEDULE_TOPIC": f"bench.schedule.{suffix}",
        "DLQ_TOPIC": f"bench.dlq.{suffix}",
    }
    await ensure_topics(servers.bootstrap, [
        TopicSpec(name, partitions if variable != "DLQ_TOPIC" else 1)
        for variable, name in names.items()
    ])
    return names
