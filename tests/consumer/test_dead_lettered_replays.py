"""An input sent to the DLQ is remembered by its source record, so a replay after a crash (the
offset not yet committed) skips it instead of running it again: not answered late behind the
inputs after it, not dead-lettered twice."""

from __future__ import annotations

import json

from tests.consumer.fakes import FakeKafkaConsumer, FakeStore
from tests.consumer.test_service_bursts import (
    TP,
    DlqProducer,
    EchoAgent,
    message,
    replies,
    run_until,
    service_on,
)

SETTINGS = {"merge_bursts": False, "max_retries": 0}


def dead_letters(producer: DlqProducer) -> list[str]:
    return [json.loads(v)["message"] for topic, _, v in producer.sent
            if topic == "inbound.turns.dlq"]


async def test_a_dead_lettered_input_is_skipped_when_replayed() -> None:
    """Three sessions, one bad message among good ones; then the whole partition again from
    offset 0, as after a crash before the commit: nothing runs or is dead-lettered twice, and
    every session keeps its own replies."""
    store = FakeStore()
    records = [message("a", "m0"), message("b", "bad"), message("a", "m1"),
               message("c", "x0"), message("b", "m2"), message("c", "x1")]

    first = FakeKafkaConsumer([TP])
    for record in records:
        first.append(TP, *record)
    agent, producer = EchoAgent(), DlqProducer()
    service = service_on(first, agent, producer, store, **SETTINGS)
    await run_until(service, lambda: first.committed(TP) == 6, "the partition is committed")
    assert dead_letters(producer) == ["bad"]
    assert (TP.topic, TP.partition, 1) in store.dead_lettered
    assert [replies(producer, s) for s in "abc"] == [["m0", "m1"], ["m2"], ["x0", "x1"]]
    ran = len(agent.requests)

    replayed = FakeKafkaConsumer([TP])
    for record in records:
        replayed.append(TP, *record)
    again = DlqProducer()
    service = service_on(replayed, agent, again, store, **SETTINGS)
    await run_until(service, lambda: replayed.committed(TP) == 6, "the replay is committed")
    assert len(agent.requests) == ran  # no turn ran again, the bad message's included
    assert dead_letters(again) == []
    assert [replies(again, s) for s in "abc"] == [[], [], []]
