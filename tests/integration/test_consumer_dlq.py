"""Malformed inputs go to the DLQ with a reason; the good ones next to them are answered."""

from __future__ import annotations

import uuid

import pytest
from aiokafka import AIOKafkaConsumer

from tests.integration.harness import (
    DLQ,
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
