"""A hot conversation on the real broker: its partition is paused alone, so conversations on
the other partition are fetched and answered while its backlog waits."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from aiokafka.partitioner import murmur2

from tests.integration.harness import (
    SetupFactory,
    counting_agent,
    message,
    running_consumer,
    verbatim_texts,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PARTITIONS = 2
HOT_DELAY_MS = 2000  # each hot turn's model call; the backlog outlasts the test


def partition_of(session_id: str) -> int:
    """The partition the default partitioner gives this key."""
    return (murmur2(session_id.encode()) & 0x7FFFFFFF) % PARTITIONS


def sessions_on(partition: int, count: int, prefix: str) -> list[str]:
    found: list[str] = []
    while len(found) < count:
        candidate = f"{prefix}-{uuid.uuid4().hex[:8]}"
        if partition_of(candidate) == partition:
            found.append(candidate)
    return found


async def test_quiet_conversations_are_answered_while_a_hot_partition_waits(
    service_setup: SetupFactory,
) -> None:
    """With 60 slow inputs waiting for one session, eight conversations on the other partition
    are answered before the hot session gets through five of its inputs, in order."""
    setup = await service_setup(partitions=PARTITIONS)
    (hot,) = sessions_on(0, 1, "hot")
    quiet = sessions_on(1, 8, "quiet")
    backlog: list[dict[str, Any]] = [
        message(hot, f"h{n}", delay_ms=HOT_DELAY_MS) for n in range(60)
    ]
    settings = setup.settings(max_buffered_records=20)  # a share of 10 per partition
    async with running_consumer(settings, counting_agent(), stop_within=60):
        await setup.produce(backlog)
        async with setup.reader() as replies:
            await replies.until(lambda v: hot in verbatim_texts(v))
            await setup.produce([message(sid, f"q{n}") for n in range(2) for sid in quiet])
            values = await replies.until(
                lambda v: all(len(verbatim_texts(v).get(s, [])) == 2 for s in quiet), within=60
            )
    texts = verbatim_texts(values)
    for sid in quiet:
        assert texts[sid] == ["1:q0", "2:q1"]
    hot_done = texts[hot]
    assert hot_done == [f"{n + 1}:h{n}" for n in range(len(hot_done))]
    assert len(hot_done) < 5, hot_done
