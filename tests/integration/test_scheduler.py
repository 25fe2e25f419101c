"""The scheduler against a real PostgreSQL and a real Kafka-compatible broker.

Each test gets its own topics and an emptied timers table, runs one or two schedulers in
process, and reads the wakes back from ``inbound.turns`` like the consumer would.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from consumer.scheduler.service import FiringOptions, Scheduler, TimerStore, build_scheduler
from consumer.topics import partitions_of
from store import Store, TimerEntry
from tests.fixtures.broker import TopicFactory

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SCHEDULE = "outbound.schedule"
INBOUND = "inbound.turns"


@pytest.fixture
async def topics(kafka_topics: TopicFactory) -> dict[str, str]:
    return await kafka_topics(SCHEDULE, INBOUND, partitions=3)


@pytest.fixture
def group_id() -> str:
    return f"scheduler-test-{uuid.uuid4().hex[:8]}"


@asynccontextmanager
async def running(
    store: TimerStore, bootstrap: str, topics: dict[str, str], group_id: str
) -> AsyncIterator[Scheduler]:
    """A scheduler running in this loop until the block ends; it must stop cleanly."""
    scheduler = build_scheduler(
        store,
        bootstrap_servers=bootstrap,
        schedule_topic=topics[SCHEDULE],
        inbound_topic=topics[INBOUND],
        group_id=group_id,
        options=FiringOptions(max_idle=1.0, retry_delay=0.2),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(scheduler.run(stop))
    try:
        yield scheduler
    finally:
        stop.set()
        async with asyncio.timeout(30):
            await task


async def produce_entries(bootstrap: str, topic: str, entries: list[dict[str, Any]]) -> None:
    """Write schedule entries the way the consumer's outbox does: keyed by session id."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for entry in entries:
            body = dict(entry)
            if isinstance(body.get("at"), datetime):
                body["at"] = body["at"].isoformat()
            await producer.send_and_wait(
                topic, json.dumps(body).encode(), key=body["session_id"].encode()
            )
    finally:
        await producer.stop()


class WakeReader:
    """Reads ``inbound.turns`` from the beginning, no group, collecting wake values."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.wakes: list[dict[str, Any]] = []
        self.keys: list[bytes] = []
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
        )

    async def __aenter__(self) -> WakeReader:
        await self._consumer.start()
        partitions = await partitions_of(self._consumer, self.topic)
        self._consumer.assign([TopicPartition(self.topic, p) for p in partitions])
        await self._consumer.seek_to_beginning()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def poll(self) -> None:
        fetched = await self._consumer.getmany(timeout_ms=200)
        for records in fetched.values():
            for record in records:
                assert record.value is not None
                self.wakes.append(json.loads(record.value))
                self.keys.append(record.key or b"")

    def woken(self) -> list[str]:
        return [w["wake"] for w in self.wakes]

    async def until(self, *wakes: str) -> None:
        """Poll until every named wake has arrived (bounded by the test timeout)."""
        async with asyncio.timeout(60):
            while not set(wakes) <= set(self.woken()):
                await self.poll()

    async def drain(self) -> None:
        """Read everything produced so far, up to the partitions' end offsets."""
        assigned = list(self._consumer.assignment())
        ends = await self._consumer.end_offsets(assigned)
        async with asyncio.timeout(60):
            while await self._behind(ends):
                await self.poll()

    async def _behind(self, ends: dict[TopicPartition, int]) -> bool:
        for partition, end in ends.items():
            if await self._consumer.position(partition) < end:
                return True
        return False


def soon(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


async def test_scheduled_entry_fires_a_wake_keyed_by_session(
    store: Store, kafka_bootstrap: str, topics: dict[str, str], group_id: str
) -> None:
    """An entry on outbound.schedule fires once as {session_id, wake} keyed by the session."""
    async with running(store, kafka_bootstrap, topics, group_id), \
            WakeReader(kafka_bootstrap, topics[INBOUND]) as reader:
        await produce_entries(kafka_bootstrap, topics[SCHEDULE], [
            {"session_id": "s-1", "key": "r1:wait:1", "at": soon(1.0), "replaces": None},
        ])
        await reader.until("r1:wait:1")
    assert reader.wakes == [{"session_id": "s-1", "wake": "r1:wait:1"}]
    assert reader.keys == [b"s-1"]
    assert await store.timers_pending() == 0


async def test_replacement_moves_the_timer_and_deletes_the_old_key(
    store: Store, kafka_bootstrap: str, topics: dict[str, str], group_id: str
) -> None:
    """An entry with `replaces` deletes the named key and sets its own in one step."""
    await produce_entries(kafka_bootstrap, topics[SCHEDULE], [
        {"session_id": "s-2", "key": "silence:f:s-2:1", "at": soon(3600)},
        {"session_id": "s-2", "key": "silence:f:s-2:2", "at": soon(1.0),
         "replaces": "silence:f:s-2:1"},
    ])
    async with running(store, kafka_bootstrap, topics, group_id), \
            WakeReader(kafka_bootstrap, topics[INBOUND]) as reader:
        await reader.until("silence:f:s-2:2")
    assert reader.woken() == ["silence:f:s-2:2"]
    assert await store.timers_pending() == 0


async def test_replaced_key_never_fires(
    store: Store, kafka_bootstrap: str, topics: dict[str, str], group_id: str
) -> None:
    """A key replaced before it was due never fires, though it was due before its successor."""
    async with running(store, kafka_bootstrap, topics, group_id), \
            WakeReader(kafka_bootstrap, topics[INBOUND]) as reader:
        await produce_entries(kafka_bootstrap, topics[SCHEDULE], [
            {"session_id": "s-3", "key": "old", "at": soon(4.0)},
            {"session_id": "s-3", "key": "new", "at": soon(5.0), "replaces": "old"},
        ])
        # Same session, same partition: had "old" fired, it would be ahead of "new".
        await reader.until("new")
        await reader.drain()
    assert reader.woken() == ["new"]


async def test_equal_keys_of_many_sessions_each_fire_for_their_own_session(
    store: Store, kafka_bootstrap: str, topics: dict[str, str], group_id: str
) -> None:
    """Thirty sessions schedule the same key (a host's own key, or one stored before keys named
    their conversation): each fires once, to its own session and partition; one session's
    `replaces` of that key cancels only its own timer."""
    sessions = [f"same-{i:02d}" for i in range(30)]
    entries: list[dict[str, Any]] = [
        {"session_id": s, "key": "r1:wait:2", "at": soon(1.0)} for s in sessions
    ]
    entries.append({"session_id": sessions[0], "key": "moved", "at": soon(1.5),
                    "replaces": "r1:wait:2"})
    async with running(store, kafka_bootstrap, topics, group_id), \
            WakeReader(kafka_bootstrap, topics[INBOUND]) as reader:
        await produce_entries(kafka_bootstrap, topics[SCHEDULE], entries)
        async with asyncio.timeout(60):
            while len(reader.wakes) < len(sessions):
                await reader.poll()
        await reader.drain()
    fired = sorted((w["session_id"], w["wake"]) for w in reader.wakes)
    assert fired == sorted(
        [(sessions[0], "moved")] + [(s, "r1:wait:2") for s in sessions[1:]]
    )
    assert [k.decode() for k in reader.keys] == [w["session_id"] for w in reader.wakes]
    assert await store.timers_pending() == 0


async def test_rescheduling_a_key_moves_it(
    store: Store, kafka_bootstrap: str, topics: dict[str, str], group_id: str
) -> None:
    """A second entry with the same key moves its time; the key fires once, at the new time."""
    async with running(store, kafka_bootstrap, topics, group_id), \
            WakeReader(kafka_bootstrap, topics[INBOUND]) as reader:
        await produce_entries(kafka_bootstrap, topics[SCHEDULE], [
            {"session_id": "s-4", "key": "k", "at": soon(3600)},
            {"session_id": "s-4", "key": "k", "at": soon(1.0)},
            {"session_id": "s-4", "key": "marker", "at": soon(2.0)},
        ])
        await reader.until("k", "marker")
        await reader.drain()
    assert reader.woken() == ["k", "marker"]


async def test_timers_due_while_down_fire_on_start(
    store: Store, kafka_bootstrap: str, topics: dict[str, str], group_id: str
) -> None:
    """Stored timers and unread entries that fell due while no scheduler ran fire on start."""
    await store.upsert_timers([
        TimerEntry(key=f"stored-{i}", session_id=f"s-{i}", at=soon(-60 - i)) for i in range(5)
    ])
    await produce_entries(kafka_bootstrap, topics[SCHEDULE], [
        {"session_id": f"s-{i}", "key": f"queued-{i}", "at": soon(-30)} for i in range(5)
    ])
    expected = [f"stored-{i}" for i in range(5)] + [f"queued-{i}" for i in range(5)]
    async with running(store, kafka_bootstrap, topics, group_id), \
            WakeReader(kafka_bootstrap, topics[INBOUND]) as reader:
        await reader.until(*expected)
        await reader.drain()
    assert sorted(reader.woken()) == sorted(expected)
    assert await store.timers_pending() == 0


async def test_two_schedulers_fire_each_timer_once(
    store: Store, kafka_bootstrap: str, topics: dict[str, str], group_id: str
) -> None:
    """Two replicas on one table and one group fire every timer exactly once between them."""
    count = 600
    await store.upsert_timers([
        TimerEntry(key=f"t-{i}", session_id=f"s-{i % 50}", at=soon(0.5 + (i % 20) / 10))
        for i in range(count)
    ])
    await produce_entries(kafka_bootstrap, topics[SCHEDULE], [
        {"session_id": f"s-{i % 50}", "key": f"q-{i}", "at": soon(1.0)} for i in range(100)
    ])
    expected = {f"t-{i}" for i in range(count)} | {f"q-{i}" for i in range(100)}
    async with WakeReader(kafka_bootstrap, topics[INBOUND]) as reader:
        async with running(store, kafka_bootstrap, topics, group_id), \
                running(store, kafka_bootstrap, topics, group_id):
            await reader.until(*expected)
            async with asyncio.timeout(30):
                while await store.timers_pending():
                    await reader.poll()
        # Both stopped: every wake either produced is now on the topic.
        await reader.drain()
    assert sorted(reader.woken()) == sorted(expected)


async def test_stop_exits_cleanly_and_leaves_later_timers_stored(
    store: Store, kafka_bootstrap: str, topics: dict[str, str], group_id: str
) -> None:
    """Stopping a scheduler returns promptly and keeps timers not yet due for the next one."""
    await store.upsert_timers([TimerEntry(key="later", session_id="s-5", at=soon(3600))])
    async with running(store, kafka_bootstrap, topics, group_id) as scheduler:
        async with asyncio.timeout(30):
            # `ready` is the flag /readyz serves; polling it is what a probe does.
            while not scheduler.ready:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    assert not scheduler.ready
    assert await store.timers_pending() == 1


class FailingStore:
    """The real store, whose ``upsert_timers`` fails (as a lost connection would) until
    ``recover()``."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._down = True
        self.failures = 0

    def recover(self) -> None:
        self._down = False

    async def upsert_timers(self, entries: Any) -> None:
        if self._down:
            self.failures += 1
            raise ConnectionResetError("connection to PostgreSQL lost")
        await self._store.upsert_timers(entries)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def committed_offsets(bootstrap: str, group_id: str, topic: str) -> dict[int, int]:
    """The group's committed offset per partition (partitions without one are left out)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id)
    await consumer.start()
    try:
        partitions = await partitions_of(consumer, topic)
        found = {p: await consumer.committed(TopicPartition(topic, p)) for p in partitions}
    finally:
        await consumer.stop()
    return {p: offset for p, offset in found.items() if offset is not None and offset >= 0}


async def test_intake_commits_offsets_only_after_storing(
    store: Store, kafka_bootstrap: str, topics: dict[str, str], group_id: str
) -> None:
    """While the database write fails no offset is committed; once it works the batch is read
    again, stored, committed, and its timer fires."""
    failing = FailingStore(store)
    await produce_entries(kafka_bootstrap, topics[SCHEDULE], [
        {"session_id": "s-6", "key": "after-retry", "at": soon(-1)},
    ])
    async with running(failing, kafka_bootstrap, topics, group_id), \
            WakeReader(kafka_bootstrap, topics[INBOUND]) as reader:
        async with asyncio.timeout(60):
            # A plain counter on a test double; two failures mean one retry already happened.
            while failing.failures < 2:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        assert await committed_offsets(kafka_bootstrap, group_id, topics[SCHEDULE]) == {}
        failing.recover()
        await reader.until("after-retry")
    assert reader.woken() == ["after-retry"]
    committed = await committed_offsets(kafka_bootstrap, group_id, topics[SCHEDULE])
    assert sum(committed.values()) == 1
