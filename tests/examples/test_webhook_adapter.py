"""The webhook adapter example: bodies become ``inbound.turns`` records, keyed by session."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from consumer.turns.parser import ParsedInput, parse_record
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
    await writer.wait_closed()
    head, _, payload = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(payload)


class KeptProducer:
    """Takes ``send_and_wait`` as an acknowledged send and keeps what was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []

    async def send_and_wait(self, topic: str, *, key: bytes, value: bytes) -> None:
        self.sent.append((topic, key, value))


async def test_posts_of_many_sessions_are_forwarded_next_to_slow_and_hostile_clients() -> None:
    """Eighty clients that open a request and never finish it (more than the port's 64
    connections), a body over the cap, a drip-fed body and a head of 100 headers do not keep
    30 sessions' posts from being forwarded, each keyed by its own session, each answered 202;
    the port never holds more than its cap."""
    producer = KeptProducer()
    server = await WebhookAdapter(producer, "in").server("127.0.0.1", 0).start()  # type: ignore[arg-type]
    held = []
    try:
        for _ in range(80):
            _reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"POST /messages HTTP/1.1\r\nContent-Length: 10\r\n")
            held.append(writer)
        posts = [
            _post(server.port, "/messages",
                  json.dumps({"session_id": f"s{n}", "text": f"t{n}", "id": f"m{n}"}).encode())
            for n in range(30)
        ]
        big = _post(server.port, "/messages", b"x" * (70 * 1024))
        headers = _raw(server.port, b"POST /messages HTTP/1.1\r\n" + b"X: y\r\n" * 100
                       + b"Content-Length: 2\r\n\r\n{}")
        results = await asyncio.gather(*posts, big, headers)
    finally:
        for writer in held:
            writer.close()
        await server.stop()
    assert [status for status, _ in results[:30]] == [202] * 30
    assert results[30][0] == 413
    assert results[31].startswith(b"HTTP/1.1 431")
    assert sorted((k, json.loads(v)["message"]) for _t, k, v in producer.sent) == sorted(
        (f"s{n}".encode(), f"t{n}") for n in range(30)
    )
    assert server.peak_connections <= 64


async def _raw(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    raw = await reader.read()
    writer.close()
    await writer.wait_closed()
    return raw


@pytest.mark.integration
async def test_a_post_lands_on_the_inbound_topic_keyed_by_session(
    kafka_bootstrap: str, kafka_topics: object
) -> None:
    """POST /messages answers 202 after the broker acked, and the record is keyed by session."""
    topics = await kafka_topics("inbound.turns")  # type: ignore[operator]
    topic = topics["inbound.turns"]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    server = await WebhookAdapter(producer, topic).server("127.0.0.1", 0).start()
    port = server.port
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
        await server.stop()
        await consumer.stop()
        await producer.stop()
    assert (status, bad_status) == (202, 400)
    assert answer["queued"]["message"] == "oi"  # type: ignore[index]
    assert record.key == b"s9"
    assert json.loads(record.value)["message"] == "oi"
