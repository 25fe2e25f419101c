"""Malformed inputs go to the DLQ with a reason; the good ones next to them are answered."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from consumer.topics import partitions_of
from tests.integration.harness import (
    DLQ,
    ServiceSetup,
    SetupFactory,
    counting_agent,
    message,
    running_consumer,
    verbatim_texts,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


async def read_dlq(bootstrap: str, topic: str, count: int) -> list[object]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None,
        enable_auto_commit=False,
    )
    await consumer.start()
    records: list[object] = []
    try:
        while len(records) < count:
            batch = await consumer.getmany(timeout_ms=200)
            for part in batch.values():
                records.extend(part)
    finally:
        await consumer.stop()
    return records


async def test_malformed_record_next_to_a_good_one(service_setup: SetupFactory) -> None:
    """Not-JSON, oversized and unknown-kind records land on the DLQ with their original bytes
    and `error`/`detail` headers, while the session's good messages around them are answered
    in order and the consumer keeps running."""
    setup = await service_setup(partitions=1)
    sid = f"dlq-{uuid.uuid4().hex[:8]}"
    key = sid.encode()
    settings = setup.settings(max_record_bytes=2048)
    oversized = b'{"session_id": "%s", "message": "%s"}' % (key, b"x" * 4096)
    async with running_consumer(settings, counting_agent()):
        await setup.produce([message(sid, "antes")])
        await setup.produce(
            [b"{not json", oversized, b'{"session_id": "%s", "shout": 1}' % key], key=key
        )
        await setup.produce([message(sid, "depois")])
        async with setup.reader() as replies:
            values = await replies.until(lambda v: len(verbatim_texts(v).get(sid, [])) >= 2)
        dead = await read_dlq(setup.bootstrap, setup.topics[DLQ], 3)

    assert verbatim_texts(values)[sid] == ["1:antes", "2:depois"]
    headers = [dict(r.headers) for r in dead]  # type: ignore[attr-defined]
    assert [h["error"] for h in headers] == [b"not-json", b"too-large", b"unknown-kind"]
    assert all(h["detail"] for h in headers)
    assert [r.value for r in dead] == [  # type: ignore[attr-defined]
        b"{not json", oversized, b'{"session_id": "%s", "shout": 1}' % key
    ]
    assert all(r.key == key for r in dead)  # type: ignore[attr-defined]
    assert b"xxxx" not in b"".join(h["detail"] for h in headers)


async def dlq_count(bootstrap: str, topic: str) -> int:
    """How many records the DLQ topic holds now: read from the start up to its end offsets
    (records, not offsets, are counted: a broker may number a batch's records sparsely)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        numbers = sorted(await partitions_of(consumer, topic))
        partitions = [TopicPartition(topic, p) for p in numbers]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        count = 0
        async with asyncio.timeout(30):
            while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
                batch = await consumer.getmany(timeout_ms=200)
                count += sum(len(records) for records in batch.values())
    finally:
        await consumer.stop()
    return count


async def test_a_reread_under_a_new_group_dead_letters_nothing_again(
    service_setup: SetupFactory,
) -> None:
    """Seven refused records (key-mismatch, unknown-kind, missing-session-id, not-json, empty,
    not-an-object; most naming no conversation) among five conversations' messages reach the
    DLQ once; a consumer restarted under a new group id rereads the partition from the start
    and sends none of them again, nor answers anything twice, while the conversations' next
    messages are answered."""
    setup = await service_setup(partitions=1)
    run = uuid.uuid4().hex[:8]
    sessions = [f"rr-{run}-{n}" for n in range(5)]
    key = sessions[0].encode()
    refused = [b'{"session_id": "someone-else", "message": "x"}',
               b'{"session_id": "%s", "shout": 1}' % key, b'{"message": "no session"}',
               b"{not json", b"", b"[1, 2]", b'{"session_id": "", "message": "x"}']
    await setup.produce([message(s, "antes") for s in sessions])
    await setup.produce(refused, key=key)
    await setup.produce(refused[2:4], key=None)
    async with running_consumer(setup.settings(), counting_agent()):
        async with setup.reader() as replies:
            await replies.until(lambda v: all(len(verbatim_texts(v).get(s, [])) >= 1
                                              for s in sessions))
        await wait_until_dlq(setup, 9)
    async with running_consumer(setup.settings(), counting_agent()):  # a new group id
        await setup.produce([message(s, "depois") for s in sessions])
        async with setup.reader() as replies:
            values = await replies.until(lambda v: all(len(verbatim_texts(v).get(s, [])) >= 2
                                                       for s in sessions))
    assert await dlq_count(setup.bootstrap, setup.topics[DLQ]) == 9
    assert all(verbatim_texts(values)[s] == ["1:antes", "2:depois"] for s in sessions)


async def wait_until_dlq(setup: ServiceSetup, count: int) -> None:
    """Until the DLQ topic holds ``count`` records (it has no event to wait on)."""
    async with asyncio.timeout(30):
        while await dlq_count(setup.bootstrap, setup.topics[DLQ]) < count:  # noqa: ASYNC110
            await asyncio.sleep(0.2)
