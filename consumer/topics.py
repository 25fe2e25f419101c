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

__all__ = ["TopicSpec", "ensure_topics"]

_TOPIC_ALREADY_EXISTS = 36
_NONE = 0


@dataclass(frozen=True)
class TopicSpec:
    """One topic to have: its name, partition count and replication factor."""

    name: str
    partitions: int = 1
    replication_factor: int = 1


async def ensure_topics(
    bootstrap_servers: str,
    topics: list[TopicSpec],
    *,
    client_options: Mapping[str, Any] | None = None,
    ready_timeout: float = 20.0,
) -> None:
    """Create the topics that do not exist yet and wait until all of them have leaders."""
    if not topics:
        return
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, **dict(client_options or {}))
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(t.name, t.partitions, t.replication_factor) for t in topics]
        )
        for entry in response.topic_errors:
            name, code = entry[0], entry[1]
            if code not in (_NONE, _TOPIC_ALREADY_EXISTS):
                raise TopicSetupError(f"creating topic failed with error code {code}", topic=name)
        await _wait_ready(admin, topics, ready_within=ready_timeout)
    finally:
        await admin.close()


async def _wait_ready(
    admin: AIOKafkaAdminClient, topics: list[TopicSpec], *, ready_within: float
) -> None:
    wanted = {t.name for t in topics}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ready_within
    while True:
        described = await admin.describe_topics(sorted(wanted))
        ready = {
            d["topic"]
            for d in described
            if d["error_code"] == _NONE
            and d["partitions"]
            and all(p["leader"] >= 0 for p in d["partitions"])
        }
        if wanted <= ready:
            return
        if loop.time() > deadline:
            raise TopicSetupError(
                f"topics not ready after {ready_within:.0f}s: {sorted(wanted - ready)}"
            )
        await asyncio.sleep(0.1)
