"""A delivery worker example: ``outbound.messages`` in, each reply delivered once.

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/delivery_worker.py
    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/delivery_worker.py \\
        --post https://channel.example/send --dedupe-db delivered.sqlite3

What a real worker must do, and this one does:

- **Dedupe on ``key``.** The service publishes after it saves, so a crash between the publish
  and the offset commit republishes the same rows with the same ``key``. A key already delivered
  is skipped. A key is unique across conversations, so it is all the worker needs: two
  customers at the same step never share one. Keys are kept in SQLite (``--dedupe-db``; in
  memory by default), so a restarted worker still knows what it sent.
- **Honour ``after_ms``.** It is the pause after the previous message of the same turn (same
  ``session_id`` and ``input_id``), e.g. a short wait step before a say. The worker sleeps what
  is left of it since that previous message went out.
- **Commit after delivery.** Offsets are committed only once the message is printed or POSTed,
  so a crash re-delivers (and the dedupe table drops what already went out) instead of losing.
- **Continue the trace.** With the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` set (OTLP/HTTP),
  each delivery is a CONSUMER span ``deliver outbound.messages`` whose parent is the turn that
  wrote the reply (the record's ``traceparent``/``tracestate`` headers), and a POST carries
  that span's context on to the channel. A record without a usable context gets a new trace.

It reads one partition's records in order, which keeps each conversation's replies in order
(the service keys every record by session id).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer
from opentelemetry.trace import SpanKind, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

Deliver = Callable[[dict[str, Any]], Awaitable[None]]

_PROPAGATOR = TraceContextTextMapPropagator()


def trace_carrier(headers: Any) -> dict[str, str]:
    """The W3C trace-context headers of a record (``traceparent``, ``tracestate``) as text;
    any other header, or a value that is not text, is left out."""
    carrier: dict[str, str] = {}
    for name, value in headers or ():
        if isinstance(name, str) and name.lower() in ("traceparent", "tracestate"):
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            if isinstance(text, str):
                carrier.setdefault(name.lower(), text)
    return carrier


class DeliveredKeys:
    """The keys already delivered, in SQLite so that a restart keeps them."""

    def __init__(self, path: str = ":memory:") -> None:
        self._db = sqlite3.connect(path)
        self._db.execute("CREATE TABLE IF NOT EXISTS delivered (key TEXT PRIMARY KEY)")

    def seen(self, key: str) -> bool:
        row = self._db.execute("SELECT 1 FROM delivered WHERE key = ?", (key,)).fetchone()
        return row is not None

    def add(self, key: str) -> None:
        self._db.execute("INSERT OR IGNORE INTO delivered (key) VALUES (?)", (key,))
        self._db.commit()


class DeliveryWorker:
    """Turns outbound records into deliveries: dedupe, pace, deliver, remember."""

    def __init__(
        self,
        deliver: Deliver,
        keys: DeliveredKeys,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        tracer: Tracer | None = None,
        topic: str = "outbound.messages",
    ) -> None:
        self.deliver = deliver
        self.keys = keys
        self._tracer = tracer
        self._topic = topic
        self._sleep = sleep
        self._monotonic = monotonic
        # session id -> (input id of the last delivered message, when it went out)
        self._last: dict[str, tuple[str | None, float]] = {}

    async def handle(self, value: dict[str, Any], headers: Any = None) -> bool:
        """Deliver one outbound message unless its key was delivered; True when delivered.

        With a tracer, inside a CONSUMER span continuing the trace in ``headers`` (the
        record's), current while ``deliver`` runs."""
        if self._tracer is None:
            return await self._handle(value)
        with self._tracer.start_as_current_span(
            f"deliver {self._topic}",
            context=_PROPAGATOR.extract(trace_carrier(headers)),
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "kafka",
                "messaging.operation.type": "process",
                "messaging.operation.name": "deliver",
                "messaging.destination.name": self._topic,
                "gen_ai.conversation.id": str(value.get("session_id")),
            },
        ) as span:
            delivered = await self._handle(value)
            span.set_attribute("turnflow.delivered", delivered)
            return delivered

    async def _handle(self, value: dict[str, Any]) -> bool:
        key = value.get("key")
        if not isinstance(key, str) or self.keys.seen(key):
            return False
        session_id = str(value.get("session_id"))
        after_ms = int(value.get("after_ms") or 0)
        previous = self._last.get(session_id)
        if after_ms and previous is not None and previous[0] == value.get("input_id"):
            remaining = after_ms / 1000 - (self._monotonic() - previous[1])
            if remaining > 0:
                await self._sleep(remaining)
        elif after_ms:
            await self._sleep(after_ms / 1000)
        await self.deliver(value)
        self.keys.add(key)
        self._last[session_id] = (value.get("input_id"), self._monotonic())
        return True


async def print_message(value: dict[str, Any]) -> None:
    print(f"[{value.get('session_id')}] {value.get('text')}", flush=True)


def post_to(url: str) -> Deliver:
    import httpx

    client = httpx.AsyncClient(timeout=10)

    async def post(value: dict[str, Any]) -> None:
        headers: dict[str, str] = {}
        _PROPAGATOR.inject(headers)  # the delivery span's context, for the channel to continue
        response = await client.post(url, json=value, headers=headers)
        response.raise_for_status()  # not delivered: no commit, the record comes back

    return post


async def run(bootstrap: str, topic: str, group: str, worker: DeliveryWorker) -> None:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    print(f"delivery worker reading {topic} at {bootstrap} (group {group})", flush=True)
    try:
        async for record in consumer:
            try:
                value = json.loads(record.value)
            except (TypeError, ValueError):
                value = None  # not ours to fix here; the service never writes such a record
            if isinstance(value, dict):
                await worker.handle(value, record.headers)
            await consumer.commit()
    finally:
        await consumer.stop()


def tracer_from_environment() -> Tracer | None:
    """A tracer exporting over OTLP/HTTP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set; None, and no tracing, otherwise."""
    if not (os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()  # OTEL_SERVICE_NAME and OTEL_TRACES_SAMPLER apply
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider.get_tracer("turnflow-delivery-example")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    )
    parser.add_argument(
        "--topic", default=os.environ.get("MESSAGES_TOPIC", "outbound.messages")
    )
    parser.add_argument("--group", default="turnflow-delivery-example")
    parser.add_argument("--post", metavar="URL", help="POST each message here instead of printing")
    parser.add_argument("--dedupe-db", default=":memory:", help="SQLite file of delivered keys")
    args = parser.parse_args(argv)
    deliver = post_to(args.post) if args.post else print_message
    worker = DeliveryWorker(deliver, DeliveredKeys(args.dedupe_db),
                            tracer=tracer_from_environment(), topic=args.topic)
    try:
        asyncio.run(run(args.bootstrap, args.topic, args.group, worker))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
