"""Idempotent topic creation: the ``turnflow topics`` command, ``turnflow dev`` and tests.

Creating a topic that exists is success, and an existing topic is never altered: its partitions,
replication factor and ``min.insync.replicas`` are compared with what was asked for and each
difference is reported (an operator may have changed them on purpose; resizing or reconfiguring
a topic behind their back could reorder conversations or weaken its durability unseen). A
replication factor larger than the number of brokers the cluster has is refused before anything
is created: Kafka would refuse it per topic anyway, with an error code, after the topics it
could make were made. After creating, it waits until the broker's metadata lists every partition
with a leader, so a producer started right after never races the creation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from consumer.errors import TopicSetupError

__all__ = [
    "MIN_INSYNC_REPLICAS",
    "TooFewBrokersError",
    "TopicReport",
    "TopicSpec",
    "ensure_topics",
    "partitions_of",
]

MIN_INSYNC_REPLICAS = "min.insync.replicas"
_TOPIC_ALREADY_EXISTS = 36
_NONE = 0


class TooFewBrokersError(TopicSetupError):
    """The replication factor asked for is larger than the number of brokers."""


@dataclass(frozen=True)
class TopicSpec:
    """One topic to have: its name, partition count, replication factor and, when set, the
    ``min.insync.replicas`` it is created with (``None``: the broker's default, not checked)."""

    name: str
    partitions: int = 1
    replication_factor: int = 1
    min_insync_replicas: int | None = None


@dataclass(frozen=True)
class TopicReport:
    """What ``ensure_topics`` did with one topic: created it now or found it, the partition
    count the broker reports (a found topic keeps its own), and for a found topic how it
    differs from its spec (empty when it matches), one phrase per setting."""

    name: str
    created: bool
    partitions: int
    differences: tuple[str, ...] = ()


class TopicAdmin(Protocol):
    """What ``ensure_topics`` asks of an admin client (``AIOKafkaAdminClient``, or a fake)."""

    async def describe_cluster(self) -> dict[str, Any]: ...

    async def create_topics(self, new_topics: list[NewTopic]) -> Any: ...

    async def describe_topics(self, topics: list[str] | None = None) -> list[Any]: ...

    async def describe_configs(self, config_resources: list[ConfigResource]) -> list[Any]: ...


async def ensure_topics(
    bootstrap_servers: str,
    topics: list[TopicSpec],
    *,
    client_options: Mapping[str, Any] | None = None,
    ready_timeout: float = 20.0,
) -> list[TopicReport]:
    """Create the topics that do not exist yet, wait until all of them have leaders, and say
    for each whether it was created or found, with its partition count and, for a found one,
    how it differs from its spec. Raises ``TooFewBrokersError`` (nothing created) when a
    replication factor exceeds the brokers in the cluster."""
    if not topics:
        return []
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, **dict(client_options or {}))
    await admin.start()
    try:
        return await ensure_topics_with(admin, topics, ready_timeout=ready_timeout)
    finally:
        await admin.close()


async def ensure_topics_with(
    admin: TopicAdmin, topics: list[TopicSpec], *, ready_timeout: float = 20.0
) -> list[TopicReport]:
    """``ensure_topics`` on a started admin client."""
    brokers = len((await admin.describe_cluster()).get("brokers") or ())
    wanted = max(t.replication_factor for t in topics)
    if wanted > brokers:
        raise TooFewBrokersError(
            f"replication factor {wanted} needs {wanted} brokers; the cluster has {brokers}"
        )
    response = await admin.create_topics([_new_topic(t) for t in topics])
    created: set[str] = set()
    for entry in response.topic_errors:
        name, code = entry[0], entry[1]
        if code not in (_NONE, _TOPIC_ALREADY_EXISTS):
            raise TopicSetupError(f"creating topic failed with error code {code}", topic=name)
        if code == _NONE:
            created.add(name)
    described = await _wait_ready(admin, topics, ready_within=ready_timeout)
    found = [t for t in topics if t.name not in created]
    insync = await _min_insync_of(admin, [t.name for t in found if t.min_insync_replicas])
    reports = []
    for t in topics:
        partitions = described[t.name]
        differences = (
            () if t.name in created else _differences(t, partitions, insync.get(t.name))
        )
        reports.append(TopicReport(t.name, t.name in created, len(partitions), differences))
    return reports


def _new_topic(spec: TopicSpec) -> NewTopic:
    configs = (
        {MIN_INSYNC_REPLICAS: str(spec.min_insync_replicas)}
        if spec.min_insync_replicas is not None
        else {}
    )
    return NewTopic(spec.name, spec.partitions, spec.replication_factor, topic_configs=configs)


def _differences(
    spec: TopicSpec, partitions: list[dict[str, Any]], insync: str | None
) -> tuple[str, ...]:
    """How a found topic differs from ``spec``, e.g. ``replication factor 1 (3 asked for)``."""
    out = []
    if len(partitions) != spec.partitions:
        out.append(f"{len(partitions)} partitions ({spec.partitions} asked for)")
    factors = sorted({len(p["replicas"]) for p in partitions})
    if factors != [spec.replication_factor]:
        shown = "/".join(str(f) for f in factors)
        out.append(f"replication factor {shown} ({spec.replication_factor} asked for)")
    if spec.min_insync_replicas is not None and insync != str(spec.min_insync_replicas):
        out.append(
            f"{MIN_INSYNC_REPLICAS} {insync if insync is not None else 'unknown'} "
            f"({spec.min_insync_replicas} asked for)"
        )
    return tuple(out)


async def _min_insync_of(admin: TopicAdmin, names: list[str]) -> dict[str, str]:
    """Each topic's ``min.insync.replicas`` as the broker has it (its own or the default); a
    topic the broker gives no value for is left out (reported as unknown)."""
    if not names:
        return {}
    resources = [
        ConfigResource(ConfigResourceType.TOPIC, name, configs={MIN_INSYNC_REPLICAS: None})
        for name in names
    ]
    values: dict[str, str] = {}
    for response in await admin.describe_configs(resources):
        for resource in response.to_object()["resources"]:
            if resource["error_code"] != _NONE:
                continue
            for entry in resource["config_entries"]:
                if entry["config_names"] == MIN_INSYNC_REPLICAS and entry["config_value"]:
                    values[resource["resource_name"]] = entry["config_value"]
    return values


async def _wait_ready(
    admin: TopicAdmin, topics: list[TopicSpec], *, ready_within: float
) -> dict[str, list[dict[str, Any]]]:
    """The partitions (id, leader, replicas, ...) of each topic, once every topic has a leader
    for every partition."""
    wanted = {t.name for t in topics}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ready_within
    while True:
        described = await admin.describe_topics(sorted(wanted))
        ready = {
            d["topic"]: d["partitions"]
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
