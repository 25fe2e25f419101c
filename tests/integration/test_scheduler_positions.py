"""The schedule intake's positions in the database: moved with its timers, checked, read back.

A failover with asynchronous replication can lose the intake's last batches (their timers and
their positions, written in one transaction) while Kafka keeps the offsets committed for them.
Here the loss is made by hand on a running scheduler: the last batch's timers deleted and its
position set back, as the promoted database would have them. The intake's next batch finds its
position moved, writes nothing, reads the lost records again and stores them.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from sqlalchemy import text

from consumer.scheduler.service import FiringOptions, build_scheduler
from store import Store
from tests.fixtures.broker import TopicFactory
from tests.integration.test_scheduler import produce_entries, soon

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@asynccontextmanager
async def running(store: Store, bootstrap: str, topics: dict[str, str], group: str
                  ) -> AsyncIterator[None]:
    scheduler = build_scheduler(
        store, bootstrap_servers=bootstrap, schedule_topic=topics["schedule"],
        inbound_topic=topics["inbound"], group_id=group,
        options=FiringOptions(max_idle=1.0, retry_delay=0.2), positions=True,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(scheduler.run(stop))
    try:
        yield
    finally:
        stop.set()
        async with asyncio.timeout(30):
            await task


async def _scalar(store: Store, sql: str, **parameters: object) -> object:
    async with store.engine.connect() as connection:
        return (await connection.execute(text(sql), parameters)).scalar()


async def _until(store: Store, sql: str, wanted: object, **parameters: object) -> None:
    async with asyncio.timeout(30):
        while True:
            if await _scalar(store, sql, **parameters) == wanted:
                return
            await asyncio.sleep(0.1)


def _entries(sessions: list[str], first: int, count: int) -> list[dict[str, object]]:
    return [{"session_id": sessions[i % len(sessions)], "key": f"t{i}", "at": soon(3600),
             "replaces": None} for i in range(first, first + count)]


TIMERS = "SELECT count(*) FROM timers WHERE session_id LIKE :prefix"
POSITION = ("SELECT next_offset FROM source_positions WHERE consumer_group = :group "
            "AND partition = 0")


async def test_batches_a_failover_lost_are_read_and_stored_again(
    store: Store, kafka_bootstrap: str, kafka_topics: TopicFactory
) -> None:
    topics = await kafka_topics("schedule", "inbound", partitions=1)
    group = f"intake-{uuid.uuid4().hex[:8]}"
    prefix = f"pos-{uuid.uuid4().hex[:6]}"
    sessions = [f"{prefix}-{i}" for i in range(3)]
    like = f"{prefix}-%"
    async with running(store, kafka_bootstrap, topics, group):
        await produce_entries(kafka_bootstrap, topics["schedule"], _entries(sessions, 0, 3))
        await _until(store, POSITION, 3, group=group)
        await produce_entries(kafka_bootstrap, topics["schedule"], _entries(sessions, 3, 3))
        await _until(store, POSITION, 6, group=group)
        assert await _scalar(store, TIMERS, prefix=like) == 6

        # The promoted database lacks the second batch: its timers and its position.
        async with store.engine.begin() as connection:
            await connection.execute(text(
                "DELETE FROM timers WHERE session_id LIKE :prefix "
                "AND key IN ('t3', 't4', 't5')"), {"prefix": like})
            await connection.execute(text(
                "UPDATE source_positions SET next_offset = 3 WHERE consumer_group = :group"),
                {"group": group})
        assert await _scalar(store, TIMERS, prefix=like) == 3

        await produce_entries(kafka_bootstrap, topics["schedule"], _entries(sessions, 6, 1))
        await _until(store, POSITION, 7, group=group)
        assert await _scalar(store, TIMERS, prefix=like) == 7
        keys = await _scalar(
            store, "SELECT array_agg(key ORDER BY key) FROM timers WHERE session_id LIKE :prefix",
            prefix=like)
        assert keys == [f"t{i}" for i in range(7)]


async def test_a_new_intake_starts_at_the_database_position(
    store: Store, kafka_bootstrap: str, kafka_topics: TopicFactory
) -> None:
    """A group with no offsets in Kafka (lost, or a coordinator still loading them) but a
    position in the database starts there: the records before it are not stored again (a
    timer deleted since, as a fired one is, stays deleted)."""
    topics = await kafka_topics("schedule", "inbound", partitions=1)
    group = f"intake-{uuid.uuid4().hex[:8]}"
    prefix = f"pos-{uuid.uuid4().hex[:6]}"
    sessions = [f"{prefix}-{i}" for i in range(3)]
    like = f"{prefix}-%"
    async with running(store, kafka_bootstrap, topics, group):
        await produce_entries(kafka_bootstrap, topics["schedule"], _entries(sessions, 0, 3))
        await _until(store, POSITION, 3, group=group)
    # Fired and deleted meanwhile; then the group's Kafka offsets are gone (a new group name
    # with the same database position stands for that).
    await _scalar(store, "DELETE FROM timers WHERE session_id LIKE :prefix RETURNING 1",
                  prefix=like)
    lost = f"{group}-lost"
    await _scalar(store, "INSERT INTO source_positions (consumer_group, topic, partition, "
                  "next_offset) SELECT :lost, topic, partition, next_offset FROM "
                  "source_positions WHERE consumer_group = :group RETURNING 1",
                  lost=lost, group=group)
    async with running(store, kafka_bootstrap, topics, lost):
        await produce_entries(kafka_bootstrap, topics["schedule"], _entries(sessions, 3, 1))
        await _until(store, POSITION, 4, group=lost)
        keys = await _scalar(
            store, "SELECT array_agg(key ORDER BY key) FROM timers WHERE session_id LIKE :prefix",
            prefix=like)
        assert keys == ["t3"]
