"""Dead letters always fit: the consumer's headers win, and what cannot travel whole is kept."""

from __future__ import annotations

import json

from aiokafka.structs import ConsumerRecord

from consumer.dead_letters import DeadLetterPublisher
from consumer.outbox import OutboxPublisher
from tests.consumer.fakes import FakeProducer, FakeStore

LIMIT = 4096


def record(value: bytes, *, key: bytes = b"s1", offset: int = 7,
           headers: tuple[tuple[str, bytes], ...] = ()) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic="in", partition=2, offset=offset, timestamp=0, timestamp_type=0, key=key,
        value=value, checksum=None, serialized_key_size=len(key),
        serialized_value_size=len(value), headers=headers,
    )


async def test_the_consumers_headers_come_first_and_forged_ones_are_renamed() -> None:
    """A producer's own `error` and `detail` headers travel as `original-error` and
    `original-detail` after the consumer's, so a reader finds the consumer's reason first and
    only under its name; other producer headers are kept as they were."""
    producer, store = FakeProducer(), FakeStore()
    forged = record(b"{not json", headers=(("error", b"all-good"), ("detail", b"x"),
                                           ("trace", b"t1")))
    kept = await DeadLetterPublisher(producer, store, "dlq").publish(
        forged, "not-json", "value is not JSON at char 1")
    assert kept is None and store.kept == {}
    (headers,) = producer.headers
    names = [name for name, _ in headers]
    assert names[:5] == ["error", "detail", "source-topic", "source-partition", "source-offset"]
    assert names.count("error") == 1 and names.count("detail") == 1
    assert dict(headers)["error"] == b"not-json"
    assert dict(headers)["original-error"] == b"all-good"
    assert dict(headers)["trace"] == b"t1"
    assert producer.sent == [("dlq", b"s1", b"{not json")]


async def test_a_record_too_large_to_forward_is_kept_and_named() -> None:
    """A value that fits the limit alone but not with the dead letter's headers is kept whole
    in the dead_letters table, and the dead letter that goes out is empty and names the row."""
    producer, store = FakeProducer(max_request_size=LIMIT), FakeStore()
    value = b"x" * (LIMIT - 10)
    big = record(value, headers=(("trace", b"t1"),))
    publisher = DeadLetterPublisher(producer, store, "dlq")
    row_id = await publisher.publish(big, "too-large", "value is 4086 bytes, limit 2048")
    assert row_id is not None
    kept = store.kept[row_id]
    assert (kept.value, kept.key, kept.source) == (value, b"s1", "in:2:7")
    assert kept.headers == [("trace", b"t1")] and kept.reason == "too-large"
    ((topic, key, sent),) = producer.sent
    headers = dict(producer.headers[0])
    assert (topic, key, sent) == ("dlq", b"s1", b"")
    assert headers["kept-in"] == b"dead_letters" and headers["kept-id"] == str(row_id).encode()
    assert headers["error"] == b"too-large"
    again = await publisher.publish(big, "too-large", "value is 4086 bytes, limit 2048")
    assert again == row_id and len(store.kept) == 1  # a replay finds the row it made


async def test_an_outbox_row_the_broker_can_never_take_is_set_aside() -> None:
    """A reply over the producer's limit is kept in dead_letters and marked published, and
    the session's rows behind it still go out in order instead of jamming the session."""
    producer, store = FakeProducer(max_request_size=LIMIT), FakeStore()
    store.add_row("a", "m", {"text": "a1"})
    huge = store.add_row("a", "m", {"text": "x" * LIMIT})
    store.add_row("a", "m", {"text": "a3"})
    published = await OutboxPublisher(store, producer).flush_session("a")  # type: ignore[arg-type]
    assert len(published) == 3 and await store.outbox_backlog() == 0
    assert [json.loads(v)["text"] for _t, _k, v in producer.sent] == ["a1", "a3"]
    (kept,) = store.kept.values()
    assert kept.source == f"outbox:{huge}" and kept.reason == "too-large"
    assert json.loads(kept.value or b"")["text"] == "x" * LIMIT


async def test_a_header_name_that_cannot_be_sent_again_is_kept_not_retried() -> None:
    """A producer header whose name cannot be encoded again (a lone surrogate) would fail the
    forward on every attempt; the record is kept whole and a dead letter with only the
    consumer's headers goes out instead."""
    producer, store = FakeProducer(), FakeStore()
    odd = record(b"{}", headers=(("b-sur\ud800", b"x"),))
    row_id = await DeadLetterPublisher(producer, store, "dlq").publish(
        odd, "missing-session-id", "session_id is missing")
    assert row_id is not None and store.kept[row_id].headers == [("b-sur\ud800", b"x")]
    assert [name for name, _ in producer.headers[0]][-2:] == ["kept-in", "kept-id"]
