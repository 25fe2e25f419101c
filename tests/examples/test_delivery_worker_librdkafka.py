"""The delivery worker's pattern (``examples/delivery_worker.py``) on confluent-kafka.

A channel's delivery worker is often written with librdkafka rather than aiokafka. Reading
``outbound.messages`` needs no partitioner setting (it only consumes), but it must do what the
example does: commit only after delivering, dedupe on ``key``, and keep each conversation's
replies in the order of their partition. Many conversations' replies, some republished with the
same key (as after a crash between publish and commit), are read by a librdkafka consumer that
is stopped halfway and replaced by a new one in the same group with the same dedupe file: every
key is delivered once, each conversation's replies in order.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from aiokafka import AIOKafkaProducer

from examples.delivery_worker import DeliveredKeys, DeliveryWorker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SESSIONS = 30
REPLIES = 4


def _reply(session_id: str, n: int) -> dict[str, Any]:
    return {"session_id": session_id, "key": f"{session_id}:r{n}", "kind": "text",
            "text": f"{session_id} reply {n}", "after_ms": 0, "input_id": f"in-{n}",
            "version": n + 1}


async def _deliver_with_librdkafka(
    bootstrap: str, topic: str, group: str, worker: DeliveryWorker, *, stop_after: int | None,
    done: Callable[[], bool],
) -> int:
    """The example's loop on a librdkafka consumer: poll, deliver, commit that record; stop
    after ``stop_after`` records read (a worker going away), or once ``done()``. Returns how
    many records it read."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
    })
    consumer.subscribe([topic])
    read = 0
    try:
        async with asyncio.timeout(60):
            while not done() and (stop_after is None or read < stop_after):
                record = await asyncio.to_thread(consumer.poll, 0.2)
                if record is None:
                    continue
                assert record.error() is None, record.error()
                read += 1
                await worker.handle(json.loads(record.value()))
                await asyncio.to_thread(consumer.commit, message=record, asynchronous=False)
    finally:
        await asyncio.to_thread(consumer.close)
    return read


async def test_a_librdkafka_worker_delivers_each_key_once_in_order_across_a_restart(
    kafka_bootstrap: str, kafka_topics: Any, tmp_path: Path
) -> None:
    topic = (await kafka_topics("outbound.messages", partitions=3))["outbound.messages"]
    sessions = [f"conv-{i:02d}" for i in range(SESSIONS)]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for n in range(REPLIES):
            for sid in sessions:
                copies = 2 if n == 1 else 1  # the second reply republished, same key
                for _ in range(copies):
                    await producer.send(topic, key=sid.encode(),
                                        value=json.dumps(_reply(sid, n)).encode())
        await producer.flush()
    finally:
        await producer.stop()

    delivered: list[dict[str, Any]] = []

    async def deliver(value: dict[str, Any]) -> None:
        delivered.append(value)

    total = SESSIONS * REPLIES
    dedupe = str(tmp_path / "delivered.sqlite3")  # kept across the restart, as --dedupe-db
    group = f"{topic}.workers"
    read = await _deliver_with_librdkafka(
        kafka_bootstrap, topic, group, DeliveryWorker(deliver, DeliveredKeys(dedupe)),
        stop_after=total // 2, done=lambda: len(delivered) >= total,
    )
    assert 0 < len(delivered) < total  # the first worker went away halfway
    read += await _deliver_with_librdkafka(
        kafka_bootstrap, topic, group, DeliveryWorker(deliver, DeliveredKeys(dedupe)),
        stop_after=None, done=lambda: len(delivered) >= total,
    )

    assert read <= total + SESSIONS  # committed records were not read again
    assert sorted(v["key"] for v in delivered) == sorted(
        f"{sid}:r{n}" for sid in sessions for n in range(REPLIES)
    )
    for sid in sessions:
        assert [v["text"] for v in delivered if v["session_id"] == sid] == [
            f"{sid} reply {n}" for n in range(REPLIES)
        ], sid
