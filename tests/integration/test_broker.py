"""The broker fixture itself: a real broker, unique topics, a record round trip."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from consumer.errors import TopicSetupError
from consumer.topics import TopicSpec, ensure_topics, partitions_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


async def test_round_trip_on_a_unique_topic(kafka_bootstrap: str, kafka_topics) -> None:
    """A record produced to a freshly created topic is read back with its key and value."""
    names = await kafka_topics("roundtrip", partitions=2)
    topic = names["roundtrip"]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"v1", key=b"s1")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), timeout=20)
    finally:
        await consumer.stop()
    assert (record.key, record.value) == (b"s1", b"v1")


async def test_topic_names_differ_between_calls(kafka_topics) -> None:
    """Two requests for the same base name yield two distinct topics."""
    first = await kafka_topics("same")
    second = await kafka_topics("same")
    assert first["same"] != second["same"]
    assert first["same"].startswith("same.")


async def test_ensure_topics_is_idempotent(kafka_bootstrap: str, kafka_topics) -> None:
    """Creating an existing topic again succeeds and leaves it usable."""
    names = await kafka_topics("again", partitions=3)
    await ensure_topics(kafka_bootstrap, [TopicSpec(names["again"], partitions=3)])


async def test_an_assigned_topic_has_all_its_partitions(kafka_bootstrap: str, kafka_topics) -> None:
    """``partitions_of`` gives every partition of a topic a consumer reads by ``assign`` (the
    dev chat's reply and dead-letter readers). Apache Kafka tells a fresh consumer of no topic it
    has not subscribed to, so its own ``partitions_for_topic`` knows none there; the readers
    once fell back to partition 0 alone and missed replies on the others."""
    names = await kafka_topics("assigned", partitions=3)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        assert await partitions_of(consumer, names["assigned"]) == {0, 1, 2}
        with pytest.raises(TopicSetupError):
            await partitions_of(consumer, names["assigned"] + ".missing")
    finally:
        await consumer.stop()
