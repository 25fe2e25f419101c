"""The consumer's side of bursts: which waiting inputs join a turn, the quiet window, offsets
released together, and a failing burst answered message by message."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiokafka.structs import TopicPartition

from consumer.outbox import OutboxPublisher
from consumer.settings import Settings
from consumer.turns.pipeline import OutboundTopics, TurnPipeline
from consumer.turns.service import ConsumerService
from engine import TurnRequestError
from tests.consumer.fakes import FakeKafkaConsumer, FakeProducer, FakeStore, fake_clients
from tests.turns.test_backpressure import until

TP = TopicPartition("in", 0)
OTHER = TopicPartition("in", 1)


class EchoAgent:
    """Replies with the turn's messages joined; refuses a turn that holds ``bad``."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def turn(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(request)
        said = [p["message"] for p in request.get("burst", [])]
        if "message" in request:
            said.append(request["message"])
        if "bad" in said:
            raise TurnRequestError("invalid turn request: a bad message")
        state = dict(request["session"] or {"id": request["session_id"], "n": 0})
        state["n"] += 1
        text = "+".join(said) if said else f"wake:{request.get('wake')}"
        return {"session": state, "outcomes": [], "llm_calls": 1,
                "messages": [{"kind": "ai", "text": text, "key": f"k{state['n']}"}]}


class DlqProducer(FakeProducer):
    """A FakeProducer that also takes the dead-letter sends."""

    async def send_and_wait(self, topic: str, value: bytes, key: bytes | None = None,
                            headers: Any = None) -> None:
        self.sent.append((topic, key, value))


def message(session_id: str, text: str) -> tuple[bytes, bytes]:
    body = {"session_id": session_id, "message": text, "id": f"{session_id}/{text}"}
    return session_id.encode(), json.dumps(body).encode()


def message_with(session_id: str, text: str, **fields: Any) -> tuple[bytes, bytes]:
    body = {"session_id": session_id, "message": text, "id": f"{session_id}/{text}", **fields}
    return session_id.encode(), json.dumps(body).encode()


def wake(session_id: str, key: str) -> tuple[bytes, bytes]:
    return session_id.encode(), json.dumps({"session_id": session_id, "wake": key}).encode()


def service_on(consumer: FakeKafkaConsumer, agent: EchoAgent, producer: FakeProducer,
               store: FakeStore | None = None, pipeline: TurnPipeline | None = None,
               **settings: Any) -> ConsumerService:
    """A service on the doubles; ``store`` shared with an earlier one stands for the database a
    restarted consumer finds; ``pipeline``, when given, runs the turns."""
    store = store or FakeStore()
    options = Settings(kafka_bootstrap_servers="127.0.0.1:1", **settings)
    if pipeline is None:
        publisher = OutboxPublisher(store, producer)  # type: ignore[arg-type]
        pipeline = TurnPipeline(store=store, agent=agent,  # type: ignore[arg-type]
                                publisher=publisher,
                                topics=OutboundTopics(messages="out.m", schedule="out.s"))
    clients = fake_clients(consumer, store, producer, pipeline, dlq_topic=options.dlq_topic)
    service = ConsumerService(options, agent, clients=clients)  # type: ignore[arg-type]
    service.parts.handover.assigned(set(consumer.logs))
    return service


def replies(producer: FakeProducer, session_id: str) -> list[str]:
    return [json.loads(v)["text"] for topic, key, v in producer.sent
            if topic == "out.m" and key == session_id.encode()]


async def run_until(service: ConsumerService, done: Any, what: str) -> None:
    loop = asyncio.create_task(service.parts.intake.fetch_loop())
    try:
        await until(done, what)
    finally:
        service.stop()
        await loop


async def test_waiting_messages_join_and_a_wake_stops_the_burst() -> None:
    """m0 m1 m2 wake m3 waiting together: one turn for m0-m2, the wake alone, m3 alone, in
    that order; the other session's messages are never mixed in; all offsets committed."""
    consumer = FakeKafkaConsumer([TP, OTHER])
    agent, producer = EchoAgent(), FakeProducer()
    for record in (message("a", "m0"), message("a", "m1"), message("a", "m2"),
                   wake("a", "w1"), message("a", "m3")):
        consumer.append(TP, *record)
    for record in (message("b", "x0"), message("b", "x1")):
        consumer.append(OTHER, *record)
    service = service_on(consumer, agent, producer)
    await run_until(service, lambda: consumer.committed(TP) == 5 and consumer.committed(OTHER)
                    == 2, "both partitions are committed")
    assert replies(producer, "a") == ["m0+m1+m2", "wake:w1", "m3"]
    assert replies(producer, "b") == ["x0+x1"]
    first = next(r for r in agent.requests if r["session_id"] == "a")
    assert [p["id"] for p in first["burst"]] == ["a/m0", "a/m1"] and first["id"] == "a/m2"


async def test_a_message_with_another_context_or_silence_starts_a_new_turn() -> None:
    """A silenced message is not answered because a plain one came after it (nor the reverse),
    and messages from another context are not answered with this one's: each change of
    ``silenced`` or ``context`` ends the burst, and what follows joins the next turn."""
    consumer = FakeKafkaConsumer([TP])
    agent, producer = EchoAgent(), FakeProducer()
    typing = {"reason": "agent-typing"}
    for record in (
        message_with("a", "m0", silenced=typing), message_with("a", "m1", silenced=typing),
        message("a", "m2"), message("a", "m3"),
        message_with("a", "m4", context={"channel": "email"}),
        message_with("a", "m5", context={"channel": "email"}),
        message_with("a", "m6", silenced=typing),
    ):
        consumer.append(TP, *record)
    service = service_on(consumer, agent, producer)
    await run_until(service, lambda: consumer.committed(TP) == 7, "the partition is committed")
    turns = [([p["message"] for p in r.get("burst", [])] + [r["message"]],
              r.get("silenced"), r.get("context")) for r in agent.requests]
    assert turns == [
        (["m0", "m1"], typing, None),
        (["m2", "m3"], None, None),
        (["m4", "m5"], None, {"channel": "email"}),
        (["m6"], typing, None),
    ]


async def test_the_images_of_every_message_of_a_burst_reach_the_turn() -> None:
    """Three conversations interleaved on one partition, each a photo, then a question about
    it, then another photo: one turn each, whose images are that conversation's own photos,
    oldest first, and no other conversation's."""
    consumer = FakeKafkaConsumer([TP])
    agent, producer = EchoAgent(), FakeProducer()
    photos = {sid: [{"media_type": "image/jpeg", "url": f"https://example.com/{sid}-{n}.jpg"}
                    for n in range(2)] for sid in "abc"}
    for sid in "abc":
        consumer.append(TP, *message_with(sid, "look", images=[photos[sid][0]]))
    for sid in "abc":
        consumer.append(TP, *message(sid, "fixable?"))
    for sid in "abc":
        consumer.append(TP, *message_with(sid, "and this", images=[photos[sid][1]]))
    service = service_on(consumer, agent, producer)
    await run_until(service, lambda: consumer.committed(TP) == 9, "the partition is committed")
    turns = {r["session_id"]: r for r in agent.requests}
    assert len(agent.requests) == 3 and set(turns) == set("abc")
    for sid in "abc":
        assert turns[sid]["images"] == photos[sid]
        assert replies(producer, sid) == ["look+fixable?+and this"]


async def test_with_merging_off_every_message_is_its_own_turn() -> None:
    """MERGE_BURSTS=false: three waiting messages make three turns."""
    consumer = FakeKafkaConsumer([TP])
    agent, producer = EchoAgent(), FakeProducer()
    for text in ("m0", "m1", "m2"):
        consumer.append(TP, *message("a", text))
    service = service_on(consumer, agent, producer, merge_bursts=False)
    await run_until(service, lambda: consumer.committed(TP) == 3, "the partition is committed")
    assert replies(producer, "a") == ["m0", "m1", "m2"]


async def test_a_burst_is_capped_at_burst_max_messages() -> None:
    """Five waiting messages with BURST_MAX_MESSAGES=2: turns of two, two and one."""
    consumer = FakeKafkaConsumer([TP])
    agent, producer = EchoAgent(), FakeProducer()
    for n in range(5):
        consumer.append(TP, *message("a", f"m{n}"))
    service = service_on(consumer, agent, producer, burst_max_messages=2)
    await run_until(service, lambda: consumer.committed(TP) == 5, "the partition is committed")
    assert replies(producer, "a") == ["m0+m1", "m2+m3", "m4"]


async def test_the_quiet_window_lets_a_later_fragment_join() -> None:
    """With BURST_WINDOW_MS, a message produced shortly after the first joins its turn."""
    consumer = FakeKafkaConsumer([TP])
    agent, producer = EchoAgent(), FakeProducer()
    service = service_on(consumer, agent, producer, burst_window_ms=300)
    loop = asyncio.create_task(service.parts.intake.fetch_loop())
    try:
        consumer.append(TP, *message("a", "hi"))
        await asyncio.sleep(0.1)
        consumer.append(TP, *message("a", "there"))
        await until(lambda: consumer.committed(TP) == 2, "the partition is committed")
    finally:
        service.stop()
        await loop
    assert replies(producer, "a") == ["hi+there"]


async def test_a_wake_never_waits_for_the_window() -> None:
    """A wake is answered at once even with a long quiet window for messages."""
    consumer = FakeKafkaConsumer([TP])
    agent, producer = EchoAgent(), FakeProducer()
    service = service_on(consumer, agent, producer, burst_window_ms=10000)
    consumer.append(TP, *wake("a", "w"))
    started = asyncio.get_running_loop().time()
    await run_until(service, lambda: consumer.committed(TP) == 1, "the wake is committed")
    assert asyncio.get_running_loop().time() - started < 5
    assert replies(producer, "a") == ["wake:w"]


async def test_a_refused_burst_is_answered_message_by_message() -> None:
    """A burst holding a message the agent refuses: the others are answered alone and only
    the refused one goes to the DLQ; every offset is released."""
    consumer = FakeKafkaConsumer([TP])
    agent, producer = EchoAgent(), DlqProducer()
    for text in ("ok1", "bad", "ok2"):
        consumer.append(TP, *message("a", text))
    service = service_on(consumer, agent, producer)
    await run_until(service, lambda: consumer.committed(TP) == 3, "the partition is committed")
    assert replies(producer, "a") == ["ok1", "ok2"]
    dead = [json.loads(v)["message"] for topic, _, v in producer.sent
            if topic == service.settings.dlq_topic]
    assert dead == ["bad"]
