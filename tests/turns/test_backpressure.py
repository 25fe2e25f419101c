"""Back-pressure per partition: a hot conversation holds back its own partition, not the others."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka.structs import TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from consumer.outbox import OutboxPublisher
from consumer.settings import Settings
from consumer.turns.backpressure import Backpressure
from consumer.turns.pipeline import OutboundTopics, TurnPipeline
from consumer.turns.service import ConsumerService
from tests.consumer.fakes import FakeKafkaConsumer, FakeProducer, FakeStore, fake_clients

HOT = TopicPartition("in", 0)
QUIET = [TopicPartition("in", 1), TopicPartition("in", 2)]


# --- the rules -----------------------------------------------------------------------------------


def test_a_partition_pauses_at_its_share_and_resumes_at_half() -> None:
    """With three partitions sharing 30 records, one reaching 10 is paused alone and resumed
    once it is below 5; the others are never touched."""
    gate: Backpressure[str] = Backpressure(30)
    pending = {"a": 9, "b": 0, "c": 3}
    owned = set(pending)
    assert gate.update(owned, pending.__getitem__).pause == frozenset()
    pending["a"] = 10
    moves = gate.update(owned, pending.__getitem__)
    assert (moves.pause, moves.resume) == (frozenset({"a"}), frozenset())
    pending["a"] = 5
    assert gate.update(owned, pending.__getitem__).resume == frozenset()
    pending["a"] = 4
    assert gate.update(owned, pending.__getitem__).resume == frozenset({"a"})
    assert gate.paused == frozenset()


def test_one_partition_gets_the_whole_budget() -> None:
    """A consumer owning one partition pauses it at the full limit, as a single budget."""
    gate: Backpressure[str] = Backpressure(1000)
    assert gate.share(1) == 1000 and gate.share(12) == 83 and gate.share(5000) == 1
    assert gate.update({"a"}, lambda _: 999).pause == frozenset()
    assert gate.update({"a"}, lambda _: 1000).pause == frozenset({"a"})


def test_forgotten_partitions_are_no_longer_paused() -> None:
    """Revoked or newly assigned partitions leave the paused set (the client starts them
    unpaused), and a paused partition no longer owned is dropped."""
    gate: Backpressure[str] = Backpressure(2)
    gate.update({"a", "b"}, lambda _: 5)
    assert gate.paused == frozenset({"a", "b"})
    gate.forget(["a"])
    assert gate.paused == frozenset({"b"})
    gate.update({"c"}, lambda _: 0)
    assert gate.paused == frozenset()


@given(
    limit=st.integers(1, 200),
    rounds=st.lists(st.dictionaries(st.sampled_from("abcd"), st.integers(0, 300), min_size=1),
                    max_size=30),
)
def test_only_partitions_at_their_share_are_ever_paused(
    limit: int, rounds: list[dict[str, int]]
) -> None:
    """Whatever the counts, a partition is paused only when its own count reached its share,
    stays paused until it falls below half of it, and is never paused unless owned."""
    gate: Backpressure[str] = Backpressure(limit)
    for pending in rounds:
        owned = set(pending)
        before = gate.paused & owned
        moves = gate.update(owned, pending.__getitem__)
        share = gate.share(len(owned))
        assert all(pending[p] >= share for p in moves.pause)
        assert all(pending[p] < max(1, share // 2) for p in moves.resume)
        assert gate.paused <= owned
        assert gate.paused == (before - moves.resume) | moves.pause
        for p in owned - gate.paused:
            assert pending[p] < share or p in moves.resume


# --- the fetch loop ------------------------------------------------------------------------------


class GatedAgent:
    """Answers every message with ``"<n>:<text>"``; the hot session's turns wait for ``gate``."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.applied: list[tuple[str, str]] = []

    async def turn(self, request: dict[str, Any]) -> dict[str, Any]:
        if request["session_id"] == "hot":
            await self.gate.wait()
        self.applied.append((request["session_id"], request["id"]))
        state = dict(request["session"] or {"id": request["session_id"], "n": 0})
        state["n"] += 1
        return {
            "session": state,
            "messages": [{"kind": "ai", "text": f"{state['n']}:{request['message']}",
                          "key": f"k{state['n']}"}],
            "outcomes": [],
            "llm_calls": 0,
        }


def record(session_id: str, n: int) -> tuple[bytes, bytes]:
    body = {"session_id": session_id, "message": f"t{n}", "id": f"m{n}"}
    return session_id.encode(), json.dumps(body).encode()


def service_on(consumer: FakeKafkaConsumer, agent: GatedAgent, store: FakeStore,
               producer: FakeProducer, *, max_buffered: int,
               max_passed_over: int = 0) -> ConsumerService:
    # One turn per record (no bursts): the test pins one reply per message and strict order.
    # Passing over off by default: these tests pin the pausing of a full partition.
    settings = Settings(kafka_bootstrap_servers="127.0.0.1:1", max_buffered_records=max_buffered,
                        max_in_flight=8, merge_bursts=False, max_passed_over=max_passed_over)
    publisher = OutboxPublisher(store, producer)  # type: ignore[arg-type]
    pipeline = TurnPipeline(store=store, agent=agent,  # type: ignore[arg-type]
                            publisher=publisher,
                            topics=OutboundTopics(messages="out.m", schedule="out.s"))
    clients = fake_clients(consumer, store, producer, pipeline)
    service = ConsumerService(settings, agent, clients=clients)  # type: ignore[arg-type]
    service.parts.handover.assigned(set(consumer.logs))
    return service


async def until(condition: Callable[[], bool], what: str, within: float = 5.0) -> None:
    try:
        async with asyncio.timeout(within):
            while True:
                if condition():
                    return
                await asyncio.sleep(0.005)
    except TimeoutError:
        pytest.fail(f"timed out waiting until {what}")


def replies(producer: FakeProducer, session_id: str) -> list[str]:
    return [json.loads(v)["text"] for _, key, v in producer.sent if key == session_id.encode()]


async def test_quiet_partitions_keep_being_fetched_while_a_hot_one_is_paused() -> None:
    """A session with 300 waiting inputs pauses only its partition: conversations on the
    other partitions (all using the same message ids) are fetched and answered while the hot
    one is stuck, then the hot session's inputs are applied strictly in offset order and every
    partition's offsets are committed to its end."""
    consumer = FakeKafkaConsumer([HOT, *QUIET])
    agent, store, producer = GatedAgent(), FakeStore(), FakeProducer()
    service = service_on(consumer, agent, store, producer, max_buffered=30)
    share = 10  # 30 records shared by three partitions
    for n in range(300):
        consumer.append(HOT, *record("hot", n))
    loop = asyncio.create_task(service.parts.intake.fetch_loop())
    try:
        await until(lambda: HOT in consumer.paused_now, "the hot partition is paused")
        quiet = [(tp, f"q{tp.partition}-{i}") for tp in QUIET for i in range(4)]
        for n in range(2):
            for tp, sid in quiet:
                consumer.append(tp, *record(sid, n))
        await until(lambda: all(len(replies(producer, sid)) == 2 for _, sid in quiet),
                    "every quiet conversation is answered while the hot one is stuck")
        assert not agent.gate.is_set() and ("hot", "m0") not in agent.applied
        assert HOT in consumer.paused_now
        assert not consumer.ever_paused & set(QUIET)
        assert service.parts.commits.marks.pending_count(HOT) <= 2 * share  # memory stays bounded
        assert any(HOT in paused and set(fetched) & set(QUIET)
                   for paused, fetched in consumer.rounds)
        for _, sid in quiet:
            assert replies(producer, sid) == ["1:t0", "2:t1"]

        agent.gate.set()
        await until(lambda: consumer.committed(HOT) == 300, "the hot partition is committed",
                    within=20)
        await until(lambda: all(consumer.committed(tp) == 8 for tp in QUIET),
                    "the quiet partitions are committed")
    finally:
        service.stop()
        await loop
    hot = [i for s, i in agent.applied if s == "hot"]
    assert hot == [f"m{n}" for n in range(300)]
    assert replies(producer, "hot") == [f"{n + 1}:t{n}" for n in range(300)]
    assert HOT not in consumer.paused_now
