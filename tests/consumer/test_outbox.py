"""The outbox publisher and relay against in-memory doubles."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from aiokafka.errors import KafkaTimeoutError

from consumer.errors import PublishError
from consumer.outbox import OutboxPublisher, OutboxRelay, encode_payload
from tests.consumer.fakes import FakeProducer, FakeStore

OLD = datetime.now(UTC) - timedelta(minutes=5)


def texts(producer: FakeProducer) -> list[str]:
    return [json.loads(value)["text"] for _topic, _key, value in producer.sent]


async def test_relay_sends_only_old_rows_and_keeps_each_session_a_prefix() -> None:
    """Rows older than the grace go out; a session's rows after its first young row wait,
    so a session never has a newer row sent before an older one."""
    store, producer = FakeStore(), FakeProducer()
    store.add_row("a", "m", {"text": "a1"}, created_at=OLD)
    store.add_row("a", "m", {"text": "a2"})  # young: written by a live consumer just now
    store.add_row("a", "m", {"text": "a3"}, created_at=OLD)
    store.add_row("b", "m", {"text": "b1"}, created_at=OLD)
    relay = OutboxRelay(OutboxPublisher(store, producer), store,  # type: ignore[arg-type]
                        interval_s=1, grace_s=60)
    assert await relay.run_once() == 2
    assert texts(producer) == ["a1", "b1"]
    assert await store.outbox_backlog() == 2


async def test_flush_session_sends_only_that_session_in_order() -> None:
    """Flushing a session publishes its rows oldest first, keyed by session, and marks them."""
    store, producer = FakeStore(), FakeProducer()
    first = store.add_row("a", "m", {"text": "a1"})
    store.add_row("b", "m", {"text": "b1"})
    second = store.add_row("a", "m", {"text": "a2"})
    published = await OutboxPublisher(store, producer).flush_session("a")  # type: ignore[arg-type]
    assert published == [first, second]
    assert texts(producer) == ["a1", "a2"]
    assert {key for _t, key, _v in producer.sent} == {b"a"}


class FailingProducer(FakeProducer):
    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> object:
        raise KafkaTimeoutError()


async def test_failed_send_leaves_rows_unpublished() -> None:
    """A broker failure raises PublishError and marks nothing published."""
    store = FakeStore()
    store.add_row("a", "m", {"text": "a1"})
    with pytest.raises(PublishError):
        await OutboxPublisher(store, FailingProducer()).flush_session("a")  # type: ignore[arg-type]
    assert await store.outbox_backlog() == 1


def test_payload_encoding_is_compact_utf8_json() -> None:
    """Outbound values are compact JSON with non-ASCII text kept as UTF-8."""
    assert encode_payload({"text": "olá", "n": 1}) == '{"text":"olá","n":1}'.encode()


def test_payload_encoding_matches_the_stored_row() -> None:
    """A row sent straight from the save carries what the stored row holds: a NUL the table
    cannot keep goes out as U+FFFD either way, so a relayed copy equals the first one."""
    assert json.loads(encode_payload({"text": "a\x00b"})) == {"text": "a\ufffdb"}
