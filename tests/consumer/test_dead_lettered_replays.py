"""An input sent to the DLQ is remembered by its source record, so a replay after a crash (the
offset not yet committed) skips it instead of running it again: not answered late behind the
inputs after it, not dead-lettered twice."""

from __future__ import annotations

import json
from typing import Any

from aiokafka.structs import TopicPartition

from store import Store
from tests.consumer.fakes import FakeKafkaConsumer, FakeStore
from tests.turns.test_service_bursts import (
    OTHER,
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



# -- records the parser refused ------------------------------------------------------------------

REFUSED = [  # (key, value): each refused by the parser, most naming no conversation
    (b"a", b'{"session_id": "b", "message": "x"}'),  # key-mismatch
    (b"a", b'{"session_id": "a", "shout": 1}'),  # unknown-kind
    (b"a", b'{"message": "no session"}'),  # missing-session-id
    (None, b"{not json"),  # not-json
    (b"c", b""),  # empty
    (None, b"\xff\xfe"),  # not-utf8
    (b"c", b"[1, 2]"),  # not-an-object
]


class HeadedProducer(DlqProducer):
    """Keeps each send's headers too: the DLQ's source partition and offset."""

    def __init__(self) -> None:
        super().__init__()
        self.dlq: list[tuple[int, int]] = []

    async def send_and_wait(self, topic: str, value: bytes, key: bytes | None = None,
                            headers: Any = None) -> None:
        await super().send_and_wait(topic, value, key, headers)
        if topic == "inbound.turns.dlq":
            found = dict(headers)
            self.dlq.append((int(found["source-partition"]), int(found["source-offset"])))


async def test_refused_records_are_not_dead_lettered_again_on_a_reread(store: Store) -> None:
    """Seventeen records the parser refuses (key-mismatch, unknown-kind, missing-session-id,
    not-json, empty, not-utf8, not-an-object; most naming no conversation) between the
    messages of ten conversations on two partitions, on a real database: the first run sends
    each to the DLQ once, in each partition's offset order; a consumer of a new group reading
    both partitions again from offset 0 sends none of them again and runs no turn again."""
    sessions = [f"s{n}" for n in range(10)]
    logs: dict[TopicPartition, list[tuple[bytes | None, bytes]]] = {TP: [], OTHER: []}
    for n, session in enumerate(sessions):
        log = logs[TP if n % 2 else OTHER]
        log += [message(session, "m0"), REFUSED[n % len(REFUSED)], message(session, "m1")]
    logs[TP] += REFUSED
    refused = sorted((tp.partition, offset) for tp, log in logs.items()
                     for offset, record in enumerate(log) if record in REFUSED)
    runs = []
    for _ in range(2):  # the second consumer stands for a new group id: no committed offsets
        consumer = FakeKafkaConsumer([TP, OTHER])
        for tp, log in logs.items():
            for key, value in log:
                consumer.append(tp, key, value)  # type: ignore[arg-type]
        agent, producer = EchoAgent(), HeadedProducer()
        service = service_on(consumer, agent, producer, store,  # type: ignore[arg-type]
                             **SETTINGS)
        await run_until(service, lambda c=consumer: all(  # type: ignore[misc]
            c.committed(tp) == len(log) for tp, log in logs.items()
        ), "both partitions are committed")
        runs.append((agent, producer))
    (_agent, first), (second_agent, second) = runs
    assert len(refused) == 17
    assert sorted(first.dlq) == refused
    for partition in (TP.partition, OTHER.partition):  # each partition's DLQ in its order
        offsets = [o for p, o in first.dlq if p == partition]
        assert offsets == sorted(offsets)
    assert [replies(first, s) for s in sessions] == [["m0", "m1"]] * 10
    assert second.dlq == []
    assert len(second_agent.requests) == 0
    assert [replies(second, s) for s in sessions] == [[]] * 10
