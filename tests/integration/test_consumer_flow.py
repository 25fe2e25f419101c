"""The consumer end to end: inputs on inbound.turns become replies and timers, exactly once."""

from __future__ import annotations

import pytest

from store import Store
from tests.fixtures.broker import TopicFactory
from tests.integration.harness import (
    INBOUND,
    MESSAGES,
    SCHEDULE,
    CountingAgent,
    OutboundReader,
    make_settings,
    produce,
    running_consumer,
    service_topics,
    texts_by_session,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def session_id(name: str) -> str:
    import uuid

    return f"{name}-{uuid.uuid4().hex[:8]}"


async def test_multi_turn_conversation(
    kafka_bootstrap: str, database_url: str, kafka_topics: TopicFactory,
    kafka_is_embedded: bool,
) -> None:
    """Three messages of one session yield three replies in order, with input ids and the
    saved version, and a timer per turn on outbound.schedule."""
    topics = await service_topics(kafka_topics)
    sid = session_id("conv")
    settings = make_settings(kafka_bootstrap, database_url, topics, embedded=kafka_is_embedded)
    async with running_consumer(settings, CountingAgent()):
        await produce(kafka_bootstrap, topics[INBOUND], [
            {"session_id": sid, "message": "oi", "id": "m1"},
            {"session_id": sid, "message": "quero pizza", "id": "m2"},
            {"session_id": sid, "wake": f"{sid}:t2"},
        ])
        async with OutboundReader(kafka_bootstrap, topics[MESSAGES]) as replies:
            values = await replies.until(lambda v: len(v) >= 3)
        async with OutboundReader(kafka_bootstrap, topics[SCHEDULE]) as timers:
            scheduled = await timers.until(lambda v: len(v) >= 3)

    assert [v["text"] for v in values] == ["1:oi", "2:quero pizza", f"3:{sid}:t2"]
    assert [v["input_id"] for v in values] == ["m1", "m2", f"wake:{sid}:t2"]
    assert [v["version"] for v in values] == [1, 2, 3]
    assert set(values[0]) == {"session_id", "key", "kind", "text", "after_ms", "run_id",
                              "step_id", "input_id", "version"}
    assert [t["key"] for t in scheduled] == [f"{sid}:t1", f"{sid}:t2", f"{sid}:t3"]
    assert set(scheduled[0]) == {"session_id", "key", "at", "replaces"}
    assert scheduled[1]["replaces"] == f"{sid}:t1"

    store = await Store.connect(database_url)
    try:
        loaded = await store.load(sid)
        assert loaded.version == 3
        assert loaded.state is not None
        assert loaded.state["data"]["seen"] == ["oi", "quero pizza", f"{sid}:t2"]
    finally:
        await store.close()


async def test_duplicate_record_is_answered_once(
    kafka_bootstrap: str, database_url: str, kafka_topics: TopicFactory,
    kafka_is_embedded: bool,
) -> None:
    """The same message produced twice (a producer retry) gets one reply; the next message
    continues the count as if the copy had never come."""
    topics = await service_topics(kafka_topics)
    sid = session_id("dup")
    settings = make_settings(kafka_bootstrap, database_url, topics, embedded=kafka_is_embedded)
    record = {"session_id": sid, "message": "oi", "id": "wamid.1"}
    async with running_consumer(settings, CountingAgent()):
        await produce(kafka_bootstrap, topics[INBOUND], [
            record, record, {"session_id": sid, "message": "tchau", "id": "wamid.2"},
        ])
        async with OutboundReader(kafka_bootstrap, topics[MESSAGES]) as replies:
            await replies.until(lambda v: any(x["text"].endswith(":tchau") for x in v))
            values = await replies.settle(1.0)
    assert texts_by_session(values)[sid] == ["1:oi", "2:tchau"]


async def test_replayed_records_are_skipped_exactly(
    kafka_bootstrap: str, database_url: str, kafka_topics: TopicFactory,
    kafka_is_embedded: bool,
) -> None:
    """Records read again from the start (a new group on the same topic, as after a lost
    offset commit) are found in the turn log and skipped: no new turn, no new reply."""
    topics = await service_topics(kafka_topics)
    sid = session_id("replay")
    inputs = [{"session_id": sid, "message": f"m{i}"} for i in range(3)]
    first = CountingAgent()
    settings = make_settings(kafka_bootstrap, database_url, topics, embedded=kafka_is_embedded)
    await produce(kafka_bootstrap, topics[INBOUND], list(inputs))
    async with OutboundReader(kafka_bootstrap, topics[MESSAGES]) as replies:
        async with running_consumer(settings, first):
            await replies.until(lambda v: len(v) >= 3)
        second = CountingAgent()
        replay = make_settings(kafka_bootstrap, database_url, topics, embedded=kafka_is_embedded)
        async with running_consumer(replay, second) as service:
            await wait_until(lambda: sum(service.committed_offsets().values()) >= 3)
        values = await replies.settle(0.5)
    assert second.calls == []
    assert texts_by_session(values)[sid] == ["1:m0", "2:m1", "3:m2"]
