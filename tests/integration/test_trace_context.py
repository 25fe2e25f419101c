"""Traces across the topics on a real broker: a turn sets a timer, the scheduler wakes it, and
the wake's turn is the child of the scheduler's span, which links to the turn that set it.

The consumer and the scheduler run in this process, tracing into memory, against the test's
broker and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import asyncpg
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from consumer.scheduler.service import FiringOptions
from examples.delivery_worker import DeliveredKeys, DeliveryWorker, run
from store import Store
from tests.integration.harness import (
    INBOUND,
    MESSAGES,
    SCHEDULE,
    SetupFactory,
    load_when,
    running_consumer,
)
from tests.integration.test_scheduler_e2e import nudging_agent, running_scheduler

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _conversation(span: ReadableSpan) -> str | None:
    value = (span.attributes or {}).get("gen_ai.conversation.id")
    return value if isinstance(value, str) else None


async def test_a_silence_wake_is_the_scheduler_spans_child_linked_to_the_setting_turn(
    store: Store, service_setup: SetupFactory, spans: InMemorySpanExporter,
) -> None:
    """Several conversations each set a silence timer at once: every wake's turn is the child
    of the scheduler's ``send <inbound topic>`` span, a trace of its own, and that span links to
    the very turn of the same conversation that set the timer; the timer record and the wake
    record carry those contexts on the broker, and the turn log keeps each turn's trace id.
    The delivery worker example then delivers every reply in a span that is the child of the
    turn that wrote it."""
    setup = await service_setup()
    run = uuid.uuid4().hex[:6]
    sessions = [f"trace-{run}-{i:02d}" for i in range(6)]
    settings = setup.settings()
    async with (
        running_scheduler(store, setup, group_id=f"{settings.group_id}-scheduler",
                          options=FiringOptions(max_idle=1.0)),
        running_consumer(settings, nudging_agent()),
    ):
        await setup.produce([{"session_id": s, "message": "oi", "id": "m1"} for s in sessions])
        async with setup.reader() as replies:
            await replies.until(lambda v: len(v) >= 2 * len(sessions), within=90)
        for session_id in sessions:
            await load_when(setup.database_url, session_id, lambda s: s.version >= 2, within=30)
        async with setup.reader(SCHEDULE) as scheduled:
            await scheduled.until(lambda v: len(v) >= len(sessions), within=30)
            timer_records = list(scheduled.records)
        async with setup.reader(INBOUND) as inbound:
            await inbound.until(lambda v: sum("wake" in x for x in v) >= len(sessions),
                                within=30)
            inbound_records = list(inbound.records)

    delivered = await _deliver_all(setup.bootstrap, setup.topics[MESSAGES], 2 * len(sessions))
    finished = spans.get_finished_spans()
    turns = [s for s in finished if s.name == f"process {setup.topics[INBOUND]}"]
    sends = [s for s in finished if s.name == f"send {setup.topics[INBOUND]}"]
    connection = await asyncpg.connect(setup.database_url)
    try:
        logged = await connection.fetch(
            "SELECT session_id, version, trace_id FROM turns WHERE session_id = ANY($1)",
            sessions,
        )
    finally:
        await connection.close()
    trace_ids = {(r["session_id"], r["version"]): r["trace_id"] for r in logged}
    for session_id in sessions:
        mine = sorted((s for s in turns if _conversation(s) == session_id),
                      key=lambda s: s.start_time or 0)
        assert len(mine) == 2, session_id
        first, wake = mine
        (send,) = [s for s in sends if _conversation(s) == session_id]
        assert send.kind is SpanKind.PRODUCER
        assert send.parent is None  # a trace of its own
        assert [link.context.span_id for link in send.links] == [first.context.span_id]
        assert send.links[0].context.trace_id == first.context.trace_id
        assert wake.parent is not None and wake.parent.span_id == send.context.span_id
        assert wake.context.trace_id == send.context.trace_id != first.context.trace_id
        assert trace_ids[(session_id, 1)] == f"{first.context.trace_id:032x}"
        assert trace_ids[(session_id, 2)] == f"{wake.context.trace_id:032x}"
        # On the broker: the timer record in the first turn's trace, the wake in the send's.
        (timer_headers,) = [r.headers for r in timer_records if r.key == session_id.encode()]
        assert dict(timer_headers)["traceparent"].decode().split("-")[1] == (
            f"{first.context.trace_id:032x}")
        (wake_headers,) = [r.headers for r in inbound_records
                           if r.key == session_id.encode() and b'"wake"' in r.value]
        assert dict(wake_headers)["traceparent"].decode().split("-")[1:3] == [
            f"{send.context.trace_id:032x}", f"{send.context.span_id:016x}"]
        # Each reply delivered in its own turn's trace, a child of that turn's span.
        by_text = {(d.attributes or {}).get("turnflow.text"): d for d in delivered
                   if _conversation(d) == session_id}
        for text, turn in (("Olá!", first), ("Ainda está aí?", wake)):
            deliver = by_text[text]
            assert deliver.parent is not None and deliver.parent.span_id == turn.context.span_id
            assert deliver.context.trace_id == turn.context.trace_id


async def _deliver_all(bootstrap: str, topic: str, count: int) -> list[ReadableSpan]:
    """Run the delivery worker example, tracing into its own memory, until it delivered
    ``count`` replies; its finished spans, each tagged with the text it delivered."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    done = asyncio.Event()
    seen: list[str] = []

    async def deliver(value: dict[str, Any]) -> None:
        from opentelemetry import trace

        trace.get_current_span().set_attribute("turnflow.text", str(value.get("text")))
        seen.append(str(value.get("key")))
        if len(seen) >= count:
            done.set()

    worker = DeliveryWorker(deliver, DeliveredKeys(), tracer=provider.get_tracer("worker"),
                            topic=topic)
    task = asyncio.create_task(run(bootstrap, topic, f"{topic}.delivery", worker))
    try:
        await asyncio.wait_for(done.wait(), timeout=60)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return list(exporter.get_finished_spans())
