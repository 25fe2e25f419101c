"""The delivery worker example: dedupe on ``key``, pacing by ``after_ms``, keys kept on disk."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from examples.delivery_worker import (
    DeliveredKeys,
    DeliveryWorker,
    run,
    tracer_from_environment,
)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TURN_SPAN = "00f067aa0ba902b7"


def _traced_worker() -> tuple[DeliveryWorker, InMemorySpanExporter, list[str]]:
    """A worker tracing into memory; each delivery records the traceparent current in it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    seen: list[str] = []

    async def deliver(value: dict[str, Any]) -> None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)
        seen.append(carrier.get("traceparent", ""))

    worker = DeliveryWorker(deliver, DeliveredKeys(), tracer=provider.get_tracer("test"))
    return worker, exporter, seen


class _Clock:
    """A monotonic clock moved by the worker's own sleeps, so pacing is checked without time."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 3))
        self.now += seconds


def _worker(keys: DeliveredKeys | None = None) -> tuple[DeliveryWorker, list[str], _Clock]:
    sent: list[str] = []
    clock = _Clock()

    async def deliver(value: dict[str, Any]) -> None:
        sent.append(value["text"])

    worker = DeliveryWorker(
        deliver, keys or DeliveredKeys(), sleep=clock.sleep, monotonic=clock.monotonic
    )
    return worker, sent, clock


def _message(key: str, text: str, *, after_ms: int = 0, input_id: str = "m1") -> dict[str, Any]:
    return {"session_id": "s1", "key": key, "kind": "verbatim", "text": text,
            "after_ms": after_ms, "input_id": input_id}


async def test_a_republished_key_is_delivered_once() -> None:
    """The same key arriving twice (a crash republished it) reaches the customer once."""
    worker, sent, _ = _worker()
    assert await worker.handle(_message("r1:hello:1", "Hi!")) is True
    assert await worker.handle(_message("r1:hello:1", "Hi!")) is False
    assert sent == ["Hi!"]


async def test_after_ms_is_the_pause_after_the_previous_message_of_the_turn() -> None:
    """A 1500 ms ``after_ms`` right after the turn's previous message sleeps 1.5 s first."""
    worker, sent, clock = _worker()
    await worker.handle(_message("k1", "Booked."))
    await worker.handle(_message("k2", "Pay online?", after_ms=1500))
    assert sent == ["Booked.", "Pay online?"]
    assert clock.slept == [1.5]


async def test_time_already_passed_counts_toward_after_ms() -> None:
    """When the worker lagged, only what is left of ``after_ms`` is waited."""
    worker, _, clock = _worker()
    await worker.handle(_message("k1", "one"))
    clock.now += 1.0
    await worker.handle(_message("k2", "two", after_ms=1500))
    assert clock.slept == [0.5]


async def test_a_message_of_a_new_turn_waits_its_whole_after_ms() -> None:
    """With no earlier message of the same turn, ``after_ms`` is waited in full."""
    worker, _, clock = _worker()
    await worker.handle(_message("k1", "one", input_id="m1"))
    clock.now += 10
    await worker.handle(_message("k2", "two", after_ms=200, input_id="m2"))
    assert clock.slept == [0.2]


async def test_delivered_keys_survive_a_restart(tmp_path: Path) -> None:
    """Keys are kept in SQLite, so a restarted worker still drops what it already sent."""
    path = str(tmp_path / "delivered.sqlite3")
    first, sent_first, _ = _worker(DeliveredKeys(path))
    await first.handle(_message("k1", "Hi!"))
    second, sent_second, _ = _worker(DeliveredKeys(path))
    assert await second.handle(_message("k1", "Hi!")) is False
    assert (sent_first, sent_second) == (["Hi!"], [])


async def test_a_failed_delivery_is_not_remembered() -> None:
    """When delivering raises, the key is not stored, so the redelivered record goes out."""
    keys = DeliveredKeys()
    calls: list[str] = []

    async def flaky(value: dict[str, Any]) -> None:
        calls.append(value["key"])
        if len(calls) == 1:
            raise ConnectionError("channel down")

    worker = DeliveryWorker(flaky, keys)
    try:
        await worker.handle(_message("k1", "Hi!"))
    except ConnectionError:
        pass
    assert await worker.handle(_message("k1", "Hi!")) is True
    assert calls == ["k1", "k1"]


async def test_a_delivery_continues_the_trace_of_the_turn_that_wrote_the_reply() -> None:
    """A reply record carrying the turn's ``traceparent`` is delivered inside a CONSUMER span
    ``deliver outbound.messages`` whose parent is that turn's span, current while delivering
    (so a POST carries it on); a record without one gets a trace of its own."""
    worker, exporter, seen = _traced_worker()
    headers = [("traceparent", f"00-{TRACE}-{TURN_SPAN}-01".encode()),
               ("tracestate", b"vendor=1")]
    assert await worker.handle(_message("k1", "Hi!"), headers) is True
    assert await worker.handle(_message("k2", "Bye."), []) is True
    continued, alone = exporter.get_finished_spans()
    assert continued.name == "deliver outbound.messages" and continued.kind is SpanKind.CONSUMER
    assert continued.parent is not None
    assert (f"{continued.context.trace_id:032x}", f"{continued.parent.span_id:016x}") == (
        TRACE, TURN_SPAN)
    assert (continued.attributes or {})["gen_ai.conversation.id"] == "s1"
    assert seen[0].split("-")[1:3] == [TRACE, f"{continued.context.span_id:016x}"]
    assert alone.parent is None and f"{alone.context.trace_id:032x}" != TRACE


def test_the_worker_traces_only_with_an_otlp_endpoint_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without an OTLP endpoint in the environment the worker has no tracer (no tracing work);
    with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set it has one."""
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert tracer_from_environment() is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    assert tracer_from_environment() is not None


@settings(max_examples=100, deadline=None)
@given(headers=st.lists(st.tuples(
    st.sampled_from(["traceparent", "tracestate", "other"]),
    st.one_of(st.binary(max_size=60), st.text(max_size=60)),
), max_size=3))
async def test_any_trace_headers_still_deliver(headers: list[tuple[str, Any]]) -> None:
    """Whatever bytes a reply's trace headers hold, the message is delivered in a span."""
    worker, exporter, seen = _traced_worker()
    assert await worker.handle(_message("k1", "Hi!"), headers) is True
    assert len(exporter.get_finished_spans()) == 1 and len(seen) == 1


@pytest.mark.integration
async def test_reads_the_topic_and_delivers_each_key_once(
    kafka_bootstrap: str, kafka_topics: Any
) -> None:
    """Against a broker: a republished record (same key) is read twice and delivered once."""
    topic = (await kafka_topics("outbound.messages"))["outbound.messages"]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        for key, text in (("k1", "Hi!"), ("k1", "Hi!"), ("k2", "Bye.")):
            await producer.send_and_wait(
                topic, key=b"s1", value=json.dumps(_message(key, text)).encode()
            )
    finally:
        await producer.stop()
    sent: list[str] = []
    both = asyncio.Event()

    async def deliver(value: dict[str, Any]) -> None:
        sent.append(value["text"])
        if len(sent) == 2:
            both.set()

    worker = DeliveryWorker(deliver, DeliveredKeys())
    task = asyncio.create_task(run(kafka_bootstrap, topic, f"{topic}.group", worker))
    try:
        await asyncio.wait_for(both.wait(), timeout=60)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert sent == ["Hi!", "Bye."]
