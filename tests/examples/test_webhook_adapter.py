"""The webhook adapter example: bodies become ``inbound.turns`` records, keyed by session."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from consumer.parser import ParsedInput, parse_record
from examples.webhook_adapter import BadRequest, WebhookAdapter, event_record, message_record


def test_message_body_becomes_a_message_input() -> None:
    """``{"session_id", "text", "id"}`` becomes a message input the consumer's parser accepts."""
    record = message_record({"session_id": "s1", "text": "hi", "id": "wamid.1",
                             "at": "2026-01-05T09:00:00Z"})
    assert record == {"session_id": "s1", "message": "hi", "id": "wamid.1",
                      "at": "2026-01-05T09:00:00Z"}
    parsed = parse_record(b"s1", json.dumps(record).encode(), max_bytes=65536)
    assert isinstance(parsed, ParsedInput)


def test_event_body_becomes_an_event_input() -> None:
    """An event body keeps its name, payload and idempotency key."""
    record = event_record({"session_id": "s1", "event": "paid", "key": "pay-1",
                           "payload": {"amount": 45}})
    assert record == {"session_id": "s1", "event": "paid", "payload": {"amount": 45},
                      "key": "pay-1"}
    parsed = parse_record(b"s1", json.dumps(record).encode(), max_bytes=65536)
    assert isinstance(parsed, ParsedInput)


@pytest.mark.parametrize(
    ("build", "body", "reason"),
    [
        (message_record, {"text": "hi"}, "session_id"),
        (message_record, {"session_id": "s1"}, "text"),
        (event_record, {"session_id": "s1", "key": "k"}, "event"),
        (event_record, {"session_id": "s1", "event": "paid"}, "key"),
        (event_record, {"session_id": "s1", "event": "paid", "key": "k", "payload": [1]},
         "payload"),
    ],
)
def test_incomplete_bodies_are_refused(build: object, body: dict[str, object], reason: str) -> None:
    """A body missing what the record needs is a 400 naming the missing part."""
    with pytest.raises(BadRequest, match=reason):
        build(body)  # type: ignore[operator]  # parametrized over the two builders


async def _post(port: int, path: str, body: bytes) -> tuple[int, dict[str, object]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    )
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(payload)


@pytest.mark.integration
async def test_a_post_lands_on_the_inbound_topic_keyed_by_session(
    kafka_bootstrap: str, kafka_topics: object
) -> None:
    """POST /messages answers 202 after the broker acked, and the record is keyed by session."""
    topics = await kafka_topics("inbound.turns")  # type: ignore[operator]
    topic = topics["inbound.turns"]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    server = await asyncio.start_server(WebhookAdapter(producer, topic).handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka_bootstrap,
                                auto_offset_reset="earliest")
    try:
        status, answer = await _post(
            port, "/messages", b'{"session_id": "s9", "text": "oi", "id": "m1"}'
        )
        bad_status, _ = await _post(port, "/messages", b"not json")
        await consumer.start()
        record = await asyncio.wait_for(consumer.getone(), timeout=30)
    finally:
        server.close()
        await server.wait_closed()
        await consumer.stop()
        await producer.stop()
    assert (status, bad_status) == (202, 400)
    assert answer["queued"]["message"] == "oi"  # type: ignore[index]
    assert record.key == b"s9"
    assert json.loads(record.value)["message"] == "oi"
