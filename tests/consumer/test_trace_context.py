"""Trace context across the topics on the doubles: the scheduler stores a timer's context from
its schedule record and links the wake's PRODUCER span to it, the wake record carries that
span's context; outbox rows go out with the context of the turn that wrote them, whoever sends
them; any header or stored value that is not a W3C context is dropped, never raised."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiokafka import TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from consumer.outbox import OutboxPublisher
from tests.consumer.fakes import FakeKafkaConsumer, FakeStore
from tests.consumer.fakes import FakeProducer as HeaderProducer
from tests.consumer.test_scheduler import (
    T0,
    FakeConsumer,
    FakeProducer,
    FakeTimerStore,
    entry,
    make_firing,
    make_intake,
)
from tests.consumer.test_tracing import put
from tests.turns.test_service_bursts import EchoAgent, message, run_until, service_on

SCHEDULE = TopicPartition("outbound.schedule", 0)
INBOUND = TopicPartition("inbound.turns", 0)

TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


def context_of(n: int) -> tuple[str, str, str]:
    """A distinct well-formed context per ``n``: (traceparent, its trace id, its span id)."""
    trace_id, span_id = f"{n + 1:032x}", f"{n + 1:016x}"
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


@dataclass
class Record:
    """A consumed schedule record with headers, as aiokafka gives it."""

    offset: int
    value: bytes | None
    headers: Any = ()


@dataclass
class TracedProducer:
    """Acknowledges every send at once and keeps its headers; ``fail_for`` session ids get
    their ack failed."""

    sent: list[tuple[bytes, bytes, list[tuple[str, bytes]] | None]] = field(default_factory=list)
    fail_for: set[str] = field(default_factory=set)

    async def send(self, topic: str, value: bytes, *, key: bytes,
                   headers: list[tuple[str, bytes]] | None = None) -> asyncio.Future[Any]:
        ack: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if key.decode() in self.fail_for:
            ack.set_exception(ConnectionError("broker down"))
        else:
            self.sent.append((key, value, headers))
            ack.set_result(None)
        return ack


def wakes(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == "send inbound.turns"]


async def test_intake_keeps_the_records_context_with_its_timer(
    spans: InMemorySpanExporter,
) -> None:
    """A schedule record's ``traceparent``/``tracestate`` are stored with its timer; a record
    without them, or with a malformed one, gives a timer with none."""
    parent, _, _ = context_of(7)
    store, pokes = FakeTimerStore(), []
    consumer = FakeConsumer([{SCHEDULE: [
        Record(0, entry("k1", session="s1"),
               [("traceparent", parent.encode()), ("tracestate", b"vendor=abc")]),
        Record(1, entry("k2", session="s2")),
        Record(2, entry("k3", session="s3"), [("traceparent", b"00-not-a-context-01")]),
    ]}])
    await make_intake(consumer, store, pokes).step()  # type: ignore[arg-type]
    assert (store.rows[("s1", "k1")].traceparent, store.rows[("s1", "k1")].tracestate) == (
        parent, "vendor=abc")
    assert store.rows[("s2", "k2")].traceparent is None
    assert store.rows[("s3", "k3")].traceparent is None


async def test_with_tracing_off_intake_never_reads_the_headers() -> None:
    """Tracing off, a record's headers are not even looked at and the timer has no context."""

    class Untouchable:
        offset = 0
        value = entry("k1")

        @property
        def headers(self) -> Any:
            raise AssertionError("headers read while tracing is off")

    store, pokes = FakeTimerStore(), []
    consumer = FakeConsumer([{SCHEDULE: [Untouchable()]}])
    assert await make_intake(consumer, store, pokes).step() == 1  # type: ignore[arg-type]
    assert store.rows[("s1", "k1")].traceparent is None


async def test_a_wake_is_a_new_trace_linked_to_the_turn_that_set_the_timer(
    spans: InMemorySpanExporter,
) -> None:
    """Firing a timer stored with a context makes one PRODUCER span ``send inbound.turns``: no
    parent, a link to that context, the messaging and conversation attributes; the wake record
    carries the span's own context, so the wake's turn becomes its child."""
    parent, trace_id, span_id = context_of(41)
    store = FakeTimerStore(now=T0)
    store.rows[("s1", "k1")] = _entry("s1", "k1", parent, "vendor=x")
    producer = TracedProducer()
    assert await make_firing(store, producer).fire_due() == 1  # type: ignore[arg-type]

    (span,) = wakes(spans)
    assert span.kind is SpanKind.PRODUCER and span.parent is None
    (link,) = span.links
    assert (f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") == (
        trace_id, span_id)
    assert link.context.trace_state.get("vendor") == "x"
    attributes = dict(span.attributes or {})
    assert attributes["messaging.system"] == "kafka"
    assert attributes["messaging.destination.name"] == "inbound.turns"
    assert attributes["gen_ai.conversation.id"] == "s1"
    assert span.context.trace_id != link.context.trace_id
    ((_key, value, headers),) = producer.sent
    assert json.loads(value) == {"session_id": "s1", "wake": "k1"}
    sent = dict(headers or [])["traceparent"].decode()
    assert sent.split("-")[1:3] == [f"{span.context.trace_id:032x}",
                                    f"{span.context.span_id:016x}"]


async def test_a_timer_without_a_context_still_gets_its_span_without_a_link(
    spans: InMemorySpanExporter,
) -> None:
    """A timer stored before tracing (no context) is woken in a span with no link."""
    store = FakeTimerStore(now=T0)
    store.rows[("s1", "k1")] = _entry("s1", "k1", None, None)
    producer = TracedProducer()
    await make_firing(store, producer).fire_due()  # type: ignore[arg-type]
    (span,) = wakes(spans)
    assert span.links == () or list(span.links) == []
    assert producer.sent[0][2] is not None


async def test_a_failed_wake_ends_its_span_as_an_error_and_the_timer_stays(
    spans: InMemorySpanExporter,
) -> None:
    """A wake whose ack fails ends its span with an error status; its timer is kept."""
    store = FakeTimerStore(now=T0)
    store.rows[("s1", "k1")] = _entry("s1", "k1", context_of(1)[0], None)
    producer = TracedProducer(fail_for={"s1"})
    with pytest.raises(ConnectionError):
        await make_firing(store, producer).fire_due()  # type: ignore[arg-type]
    (span,) = wakes(spans)
    assert span.status.status_code is StatusCode.ERROR
    assert ("s1", "k1") in store.rows


async def test_with_tracing_off_a_wake_is_sent_without_headers() -> None:
    """Tracing off, the wake goes out exactly as before: no span, no ``headers`` argument (the
    producer double takes none)."""
    store = FakeTimerStore(now=T0)
    store.rows[("s1", "k1")] = _entry("s1", "k1", context_of(1)[0], None)
    producer = FakeProducer()
    assert await make_firing(store, producer).fire_due() == 1
    assert len(producer.sent) == 1


async def test_many_sessions_each_wake_links_to_its_own_setting_turn(
    spans: InMemorySpanExporter,
) -> None:
    """Forty sessions set timers through intake in mixed batches, fired in overlapping batches:
    every wake's span links to the context its own session's record carried, none crosses."""
    count = 40
    records = [Record(i, entry(f"timer-{i}", session=f"s{i}"),
                      [("traceparent", context_of(i)[0].encode())]) for i in range(count)]
    store, pokes = FakeTimerStore(now=T0), []
    consumer = FakeConsumer([{SCHEDULE: records[:17]}, {SCHEDULE: records[17:]}])
    intake = make_intake(consumer, store, pokes)
    await intake.step()  # type: ignore[arg-type]
    await intake.step()
    producer = TracedProducer()
    firing = make_firing(store, producer, batch_size=7, pipeline=3)  # type: ignore[arg-type]
    assert await firing.fire_due() == count
    by_session = {dict(s.attributes or {})["gen_ai.conversation.id"]: s for s in wakes(spans)}
    assert len(by_session) == count
    for i in range(count):
        (link,) = by_session[f"s{i}"].links
        _, trace_id, span_id = context_of(i)
        assert (f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") == (
            trace_id, span_id)
    for key, _value, headers in producer.sent:
        span = by_session[key.decode()]
        assert dict(headers or [])["traceparent"].decode().split("-")[1] == (
            f"{span.context.trace_id:032x}")


def _entry(session: str, key: str, traceparent: str | None, tracestate: str | None) -> Any:
    from store import TimerEntry

    return TimerEntry(key=key, session_id=session, at=T0 - timedelta(seconds=1),
                      traceparent=traceparent, tracestate=tracestate)


_HEADER_VALUES = st.one_of(
    st.none(), st.binary(max_size=80), st.text(max_size=80),
    st.builds(lambda t, s: f"00-{t}-{s}-01",
              st.text("0123456789abcdef", min_size=32, max_size=32),
              st.text("0123456789abcdef", min_size=16, max_size=16)),
    st.sampled_from(["vendor=abc", "a=1,b=2", "=", ",,,", "k=\x00", "00-" + "0" * 32 + "-" +
                     "0" * 16 + "-01", "ff-" + "a" * 32 + "-" + "b" * 16 + "-01"]),
)
_HEADER_NAMES = st.one_of(st.sampled_from(["traceparent", "tracestate", "TraceParent"]),
                          st.text(max_size=12))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(headers=st.one_of(
    st.none(), st.integers(), st.text(max_size=10),
    st.lists(st.tuples(_HEADER_NAMES, _HEADER_VALUES), max_size=4),
), kept=st.tuples(_HEADER_VALUES, _HEADER_VALUES))
async def test_any_headers_on_a_schedule_record_still_set_and_wake_the_timer(
    spans: InMemorySpanExporter, headers: Any, kept: tuple[Any, Any],
) -> None:
    """Whatever a schedule record's headers hold (bytes, text, None, not even pairs), its
    timer is stored and woken; a context is stored, linked and sent only well-formed; a timer
    whose stored context is anything at all is woken too, linked only to a well-formed one."""
    spans.clear()
    store, pokes = FakeTimerStore(now=T0 + timedelta(hours=1)), []
    consumer = FakeConsumer([{SCHEDULE: [Record(0, entry("k1"), headers)]}])
    assert await make_intake(consumer, store, pokes).step() == 1  # type: ignore[arg-type]
    stored = store.rows[("s1", "k1")]
    assert stored.traceparent is None or TRACEPARENT.match(stored.traceparent)
    store.rows[("s2", "k2")] = _entry("s2", "k2", *kept)
    producer = TracedProducer()
    assert await make_firing(store, producer).fire_due() == 2  # type: ignore[arg-type]
    by_session = {dict(s.attributes or {})["gen_ai.conversation.id"]: s for s in wakes(spans)}
    assert len(by_session["s1"].links) == (0 if stored.traceparent is None else 1)
    for link in by_session["s2"].links:
        assert link.context.is_valid
        assert f"{link.context.trace_id:032x}" in str(kept[0])
    assert len(producer.sent) == 2
    for _key, _value, sent in producer.sent:
        assert TRACEPARENT.match(dict(sent or [])["traceparent"].decode())


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stored=st.lists(st.tuples(_HEADER_VALUES, _HEADER_VALUES), min_size=1, max_size=4))
async def test_any_stored_context_on_outbox_rows_still_sends_them(
    spans: InMemorySpanExporter, stored: list[tuple[Any, Any]],
) -> None:
    """Whatever a row holds as its stored ``traceparent``/``tracestate``, the relay sends and
    marks every row; a row's headers are a well-formed context or none at all."""
    store, producer = FakeStore(), HeaderProducer()
    old = datetime.now(UTC) - timedelta(minutes=5)
    for n, (parent, state) in enumerate(stored):
        store.add_row(f"s{n % 2}", "outbound.messages", {"key": f"k{n}"}, created_at=old,
                      traceparent=parent, tracestate=state)
    publisher = OutboxPublisher(store, producer)  # type: ignore[arg-type]
    assert await publisher.flush_older(older_than=timedelta(seconds=1)) == len(stored)
    for (parent, _state), headers in zip(stored, producer.headers, strict=True):
        sent = dict(headers)
        assert set(sent) <= {"traceparent", "tracestate"}
        if sent:
            assert TRACEPARENT.match(sent["traceparent"].decode())
        if isinstance(parent, str) and TRACEPARENT.match(parent) and "-0000000000000000-" not in (
                parent) and "-" + "0" * 32 + "-" not in parent:
            assert sent["traceparent"].decode().split("-")[1] == parent.split("-")[1]


async def test_the_relay_sends_each_row_with_the_context_of_the_turn_that_wrote_it(
    spans: InMemorySpanExporter,
) -> None:
    """Rows of thirty-five sessions, each written in its own turn's trace, are re-sent by
    relay passes (no span current), each in a PRODUCER span ``send outbound.messages`` that is
    a child of its own turn's span (its ``tracestate`` kept), the record carrying that span's
    context; a row written untraced is sent in a span of a new trace."""
    store, producer = FakeStore(), HeaderProducer()
    old = datetime.now(UTC) - timedelta(minutes=5)
    for i in range(35):
        store.add_row(f"s{i}", "outbound.messages", {"key": f"k{i}"}, created_at=old,
                      traceparent=context_of(i)[0], tracestate=f"t=v{i}")
    store.add_row("untraced", "outbound.messages", {"key": "u"}, created_at=old)
    publisher = OutboxPublisher(store, producer, batch_limit=10)  # type: ignore[arg-type]
    while await publisher.flush_older(older_than=timedelta(seconds=1)):
        pass
    assert len(producer.sent) == 36
    by_span = {s.context.span_id: s for s in spans.get_finished_spans()
               if s.name == "send outbound.messages"}
    assert len(by_span) == 36
    for (_topic, key, _value), headers in zip(producer.sent, producer.headers, strict=True):
        session = (key or b"").decode()
        sent = dict(headers)
        _, trace_id, span_id = sent["traceparent"].decode().split("-")[:3]
        span = by_span[int(span_id, 16)]
        assert span.kind is SpanKind.PRODUCER
        assert dict(span.attributes or {})["gen_ai.conversation.id"] == session
        if session == "untraced":
            assert span.parent is None and "tracestate" not in sent
            continue
        i = int(session[1:])
        _, own_trace, own_span = context_of(i)
        assert trace_id == own_trace
        assert span.parent is not None and f"{span.parent.span_id:016x}" == own_span
        assert sent["tracestate"] == f"t=v{i}".encode()


async def test_with_tracing_off_the_relay_sends_no_headers() -> None:
    """Tracing off, a row stored with a context is sent without headers."""
    store, producer = FakeStore(), HeaderProducer()
    store.add_row("s1", "outbound.messages", {"key": "k"},
                  created_at=datetime.now(UTC) - timedelta(minutes=5),
                  traceparent=context_of(1)[0])
    await OutboxPublisher(store, producer).flush_older(  # type: ignore[arg-type]
        older_than=timedelta(seconds=1))
    assert producer.headers == [[]]


async def test_a_later_turn_flushes_older_rows_in_their_own_turns_trace(
    spans: InMemorySpanExporter,
) -> None:
    """A session's row left unpublished by an earlier turn, sent by the session's next turn,
    carries the earlier turn's context; the new turn's reply carries the new turn's, and both
    turns' rows were stored with their own context."""
    store, producer = FakeStore(), HeaderProducer()
    earlier, _, _ = context_of(99)
    store.add_row("a", "outbound.messages", {"session_id": "a", "key": "left"},
                  traceparent=earlier)
    consumer = FakeKafkaConsumer([INBOUND])
    put(consumer, INBOUND, message("a", "m1"))
    service = service_on(consumer, EchoAgent(), producer, store=store)
    await run_until(service, lambda: consumer.committed(INBOUND) == 1, "the turn is committed")

    (turn,) = [s for s in spans.get_finished_spans() if s.name == "process inbound.turns"]
    sent = {json.loads(value)["key"]: dict(headers)
            for (_t, _k, value), headers in zip(producer.sent, producer.headers, strict=True)}
    assert sent["left"]["traceparent"].decode() == earlier
    new = [h for key, h in sent.items() if key != "left"]
    assert new, "the turn replied"
    for headers in new:
        assert headers["traceparent"].decode().split("-")[1:3] == [
            f"{turn.context.trace_id:032x}", f"{turn.context.span_id:016x}"]
    own = [row for row in store.rows if row.payload.get("key") != "left"]
    assert own and all(row.traceparent is not None and row.traceparent.split("-")[2] ==
                       f"{turn.context.span_id:016x}" for row in own)
