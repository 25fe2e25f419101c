"""Sessions run concurrently, each strictly in order, even inside one partition."""

from __future__ import annotations

import random
import uuid

import pytest

from tests.fixtures.broker import TopicFactory
from tests.integration.harness import (
    INBOUND,
    MESSAGES,
    OutboundReader,
    counting_agent,
    make_settings,
    message,
    produce,
    running_consumer,
    service_topics,
    verbatim_texts,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


async def test_slow_session_does_not_hold_up_another_in_the_same_partition(
    kafka_bootstrap: str, database_url: str, kafka_topics: TopicFactory,
    kafka_is_embedded: bool,
) -> None:
    """With one partition, a session whose model takes seconds is answered after a fast
    session that wrote later has had all its replies, and the offset commit waits for it."""
    topics = await service_topics(kafka_topics, partitions=1)
    slow, fast = f"slow-{uuid.uuid4().hex[:6]}", f"fast-{uuid.uuid4().hex[:6]}"
    settings = make_settings(kafka_bootstrap, database_url, topics, embedded=kafka_is_embedded)
    async with running_consumer(settings, counting_agent()) as service:
        await produce(kafka_bootstrap, topics[INBOUND], [
            message(slow, "devagar", delay_ms=4000),
            message(fast, "a"), message(fast, "b"), message(fast, "c"),
        ])
        async with OutboundReader(kafka_bootstrap, topics[MESSAGES]) as replies:
            early = await replies.until(lambda v: len(verbatim_texts(v).get(fast, [])) >= 3,
                                        within=15)
            assert slow not in verbatim_texts(early)
            # Everything after the slow record is done, yet the slow one holds the commit.
            assert sum(service.committed_offsets().values()) == 0
            values = await replies.until(lambda v: slow in verbatim_texts(v), within=15)
    texts = verbatim_texts(values)
    assert texts[fast] == ["1:a", "2:b", "3:c"]
    assert texts[slow] == ["1:devagar"]


async def test_per_session_order_under_random_model_latency(
    kafka_bootstrap: str, database_url: str, kafka_topics: TopicFactory,
    kafka_is_embedded: bool,
) -> None:
    """Eight sessions of six messages each, interleaved over two partitions with random model
    latency: every session's replies come out complete and in its input order."""
    topics = await service_topics(kafka_topics, partitions=2)
    rnd = random.Random(20261130)
    sessions = [f"order{i}-{uuid.uuid4().hex[:6]}" for i in range(8)]
    inputs = [
        message(sid, f"m{n}", delay_ms=rnd.randint(0, 250))
        for n in range(6)
        for sid in sessions
    ]
    settings = make_settings(kafka_bootstrap, database_url, topics, embedded=kafka_is_embedded,
                             max_in_flight=6)
    async with running_consumer(settings, counting_agent()):
        await produce(kafka_bootstrap, topics[INBOUND], inputs)
        async with OutboundReader(kafka_bootstrap, topics[MESSAGES]) as replies:
            values = await replies.until(
                lambda v: sum(len(t) for t in verbatim_texts(v).values()) >= len(inputs),
                within=45,
            )
    texts = verbatim_texts(values)
    for sid in sessions:
        assert texts[sid] == [f"{n + 1}:m{n}" for n in range(6)], sid


async def test_fetching_pauses_and_resumes_under_back_pressure(
    kafka_bootstrap: str, database_url: str, kafka_topics: TopicFactory,
    kafka_is_embedded: bool,
) -> None:
    """With room for only four buffered records, forty inputs are still all answered in
    order: fetching pauses while the buffer is full and resumes as it drains."""
    topics = await service_topics(kafka_topics, partitions=2)
    sessions = [f"bp{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    inputs = [message(sid, f"m{n}", delay_ms=20) for n in range(10) for sid in sessions]
    settings = make_settings(kafka_bootstrap, database_url, topics, embedded=kafka_is_embedded,
                             max_buffered_records=4, max_in_flight=2)
    async with running_consumer(settings, counting_agent()):
        await produce(kafka_bootstrap, topics[INBOUND], inputs)
        async with OutboundReader(kafka_bootstrap, topics[MESSAGES]) as replies:
            values = await replies.until(
                lambda v: sum(len(t) for t in verbatim_texts(v).values()) >= len(inputs),
                within=60,
            )
    texts = verbatim_texts(values)
    for sid in sessions:
        assert texts[sid] == [f"{n + 1}:m{n}" for n in range(10)], sid
