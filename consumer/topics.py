"""Idempotent topic creation: the ``turnflow topics`` command, ``turnflow dev`` and tests.

Creating a topic that exists is success (whatever its partition count: we never resize
topics behind an operator's back). After creating, it waits until the broker's metadata lists
every partition with a leader, so a producer started right after never races the creation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from consumer.errors import TopicSetupError

__all__ = ["TopicReport", "TopicSpec", "ensure_topics", "partitions_of"]

_TOPIC_ALREADY_EXISTS = 36
_NONE = 0


@dataclass(frozen=True)
class TopicSpec:
    """One topic to have: its name, partition count and replication factor."""

    name: str
    partitions: int = 1
    replication_factor: int = 1


@dataclass(frozen=True)
class TopicReport:
    """What ``ensure_topics`` did with one topic: created it now or found it, and the
    partition count the broker reports (a found topic keeps its own)."""

    name: str
    created: bool
    partitions: int


async def ensure_topics(
    bootstrap_servers: str,
    topics: list[TopicSpec],
    *,
    client_options: Mapping[str, Any] | None = None,
    ready_timeout: float = 20.0,
) -> list[TopicReport]:
    """Create the topics that do not exist yet, wait until all of them have leaders, and say
    for each whether it was created or found, with its partition count."""
    if not topics:
        return []
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, **dict(client_options or {}))
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(t.name, t.partitions, t.replication_factor) for t in topics]
        )
        created: set[str] = set()
        for entry in response.topic_errors:
            name, code = entry[0], entry[1]
            if code not in (_NONE, _TOPIC_ALREADY_EXISTS):
                raise TopicSetupError(f"creating topic failed with error code {code}", topic=name)
            if code == _NONE:
                created.add(name)
        counts = await _wait_ready(admin, topics, ready_within=ready_timeout)
        return [TopicReport(t.name, t.name in created, counts[t.name]) for t in topics]
    finally:
        await admin.close()


async def _wait_ready(
    admin: AIOKafkaAdminClient, topics: list[TopicSpec], *, ready_within: float
) -> dict[str, int]:
    """Partition counts by topic, once every topic has a leader for every partition."""
    wanted = {t.name for t in topics}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ready_within
    while True:
        described = await admin.describe_topics(sorted(wanted))
        ready = {
            d["topic"]: len(d["partitions"])
            for d in described
            if d["error_code"] == _NONE
            and d["partitions"]
            and all(p["leader"] >= 0 for p in d["partitions"])
        }
        if wanted <= set(ready):
            return ready
        if loop.time() > deadline:
            raise TopicSetupError(
                f"topics not ready after {ready_within:.0f}s: {sorted(wanted - set(ready))}"
            )
        await asyncio.sleep(0.1)


async def partitions_of(consumer: Any, topic: str) -> set[int]:
    """The partition ids of ``topic``, for a started aiokafka consumer that reads it by
    ``assign`` rather than by subscribing; raises ``TopicSetupError`` when it has none.

    A consumer's own metadata covers only the topics it subscribed to, and Apache Kafka answers
    the metadata request it starts with (no topics) with none at all, so its
    ``partitions_for_topic`` knows nothing of an assigned topic. (Tansu answers with every
    topic, which hid this.) The cluster's full metadata is fetched here instead."""
    cluster = await consumer._client.fetch_all_metadata()  # aiokafka's one way to ask for it
    partitions = cluster.partitions_for_topic(topic)
    if not partitions:
        raise TopicSetupError("the broker reports no partitions", topic=topic)
    return set(partitions)
