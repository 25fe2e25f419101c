"""Traces of the turns: one CONSUMER span per turn on the service's doubles, its parent taken
from the record's ``traceparent``, its context on every record the turn publishes, and nothing
at all when no OTEL_* variable configures an exporter."""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from typing import Any

import pytest
from aiokafka.structs import TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from consumer import tracing
from consumer.errors import TracingSettingsError
from consumer.logs import JsonFormatter
from tests.consumer.fakes import FakeKafkaConsumer, FakeProducer
from tests.fixtures.otlp_receiver import otlp_receiver
from tests.turns.test_service_bursts import EchoAgent, message, run_until, service_on

TP = TopicPartition("inbound.turns", 0)
OTHER = TopicPartition("inbound.turns", 1)

PARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{PARENT_TRACE}-{PARENT_SPAN}-01".encode()


def put(consumer: FakeKafkaConsumer, tp: TopicPartition, record: tuple[bytes, bytes],
        headers: list[tuple[str, Any]] | None = None) -> int:
    """Produce ``record`` to ``tp`` with ``headers``; returns its offset."""
    offset = consumer.append(tp, *record)
    log = consumer.logs[tp]
    log[offset] = dataclasses.replace(log[offset], headers=list(headers or ()))
    return offset


def turn_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == "process inbound.turns"]


def trace_headers(producer: FakeProducer) -> list[tuple[str, dict[str, bytes]]]:
    """Per sent record: its session id and its trace headers."""
    return [(json.loads(value)["session_id"], dict(headers))
            for (_topic, _key, value), headers in zip(producer.sent, producer.headers,
                                                      strict=True)]


async def test_a_turn_is_one_consumer_span_with_the_messaging_attributes(
    spans: InMemorySpanExporter,
) -> None:
    """One message through the service gives one CONSUMER span ``process inbound.turns`` with
    the messaging attributes of its record and the conversation id, a new root without a
    ``traceparent``, and its reply carries that span's context."""
    consumer, agent, producer = FakeKafkaConsumer([TP]), EchoAgent(), FakeProducer()
    put(consumer, TP, message("a", "m0"))
    offset = put(consumer, TP, message("a", "m1"))
    service = service_on(consumer, agent, producer, group_id="g1", merge_bursts=False)
    await run_until(service, lambda: consumer.committed(TP) == 2, "both are committed")
    found = turn_spans(spans)
    assert len(found) == 2
    span = found[-1]
    assert span.kind is SpanKind.CONSUMER and span.parent is None
    assert dict(span.attributes or {}) == {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "inbound.turns",
        "messaging.destination.partition.id": "0",
        "messaging.kafka.offset": offset,
        "messaging.consumer.group.name": "g1",
        "messaging.kafka.message.key": "a",
        "gen_ai.conversation.id": "a",
    }
    sent = trace_headers(producer)
    assert len(sent) == 2
    context = span.get_span_context()
    assert context is not None
    assert sent[-1][1]["traceparent"].startswith(
        f"00-{context.trace_id:032x}-{context.span_id:016x}-".encode()
    )


async def test_a_traceparent_on_the_record_is_the_parent(spans: InMemorySpanExporter) -> None:
    """A valid W3C ``traceparent`` (and ``tracestate``) header makes the producer's span the
    turn span's parent, in the same trace, and the reply continues that trace."""
    consumer, agent, producer = FakeKafkaConsumer([TP]), EchoAgent(), FakeProducer()
    put(consumer, TP, message("a", "m0"),
        [("traceparent", TRACEPARENT), ("tracestate", b"vendor=x")])
    service = service_on(consumer, agent, producer)
    await run_until(service, lambda: consumer.committed(TP) == 1, "it is committed")
    [span] = turn_spans(spans)
    assert span.parent is not None and span.parent.is_remote
    assert f"{span.parent.span_id:016x}" == PARENT_SPAN
    assert f"{span.context.trace_id:032x}" == PARENT_TRACE
    [(_session, headers)] = trace_headers(producer)
    assert headers["traceparent"].split(b"-")[1] == PARENT_TRACE.encode()
    assert headers["tracestate"] == b"vendor=x"


async def test_a_burst_is_parented_by_its_last_record_and_links_all(
    spans: InMemorySpanExporter,
) -> None:
    """Messages answered as one turn give one span: its parent is the last record's context
    and it links every record that carried one."""
    consumer, agent, producer = FakeKafkaConsumer([TP]), EchoAgent(), FakeProducer()
    parents = [f"00-{i:032x}-{i:016x}-01".encode() for i in (1, 2, 3)]
    for i, parent in enumerate(parents):
        put(consumer, TP, message("a", f"m{i}"), [("traceparent", parent)])
    service = service_on(consumer, agent, producer)
    await run_until(service, lambda: consumer.committed(TP) == 3, "all are committed")
    assert [json.loads(v)["text"] for _t, _k, v in producer.sent] == ["m0+m1+m2"]
    [span] = turn_spans(spans)
    assert span.parent is not None and span.parent.span_id == 3
    assert sorted(link.context.span_id for link in span.links) == [1, 2, 3]
    assert (span.attributes or {})["messaging.batch.message_count"] == 3
    assert (span.attributes or {})["messaging.kafka.offset"] == 2


async def test_many_conversations_at_once_never_mix_spans(
    spans: InMemorySpanExporter,
) -> None:
    """Forty conversations on two partitions, each message with its own parent: every span's
    conversation id, key and parent are its own record's, and every reply carries the trace
    of its own conversation's turn."""
    consumer, agent, producer = FakeKafkaConsumer([TP, OTHER]), EchoAgent(), FakeProducer()
    parent_of: dict[str, int] = {}
    for n in range(40):
        session = f"s{n}"
        parent_of[session] = n + 1
        put(consumer, TP if n % 2 else OTHER, message(session, "hi"),
            [("traceparent", f"00-{n + 1:032x}-{n + 1:016x}-01".encode())])
    service = service_on(consumer, agent, producer)
    await run_until(service, lambda: consumer.committed(TP) == 20
                    and consumer.committed(OTHER) == 20, "all are committed")
    found = turn_spans(spans)
    assert len(found) == 40
    trace_of: dict[str, int] = {}
    for span in found:
        attributes = span.attributes or {}
        session = str(attributes["gen_ai.conversation.id"])
        assert attributes["messaging.kafka.message.key"] == session
        assert span.parent is not None and span.parent.span_id == parent_of[session]
        assert span.context.trace_id == parent_of[session]
        trace_of[session] = span.context.trace_id
    assert len(trace_of) == 40
    sent = trace_headers(producer)
    assert len(sent) == 40
    for session, headers in sent:
        assert headers["traceparent"].split(b"-")[1] == f"{trace_of[session]:032x}".encode()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.one_of(st.binary(max_size=80), st.text(max_size=80).map(str.encode),
                       st.none()),
       state=st.one_of(st.binary(max_size=40), st.none()),
       name=st.sampled_from(["traceparent", "TraceParent", "tracestate", "x"]))
async def test_any_traceparent_header_still_runs_the_turn(
    spans: InMemorySpanExporter, value: bytes | None, state: bytes | None, name: str
) -> None:
    """Whatever bytes or text a producer puts in the trace headers, the turn runs, is answered
    and committed; a value that is no valid trace context gives a new root."""
    spans.clear()
    consumer, agent, producer = FakeKafkaConsumer([TP]), EchoAgent(), FakeProducer()
    put(consumer, TP, message("a", "m0"), [(name, value), ("tracestate", state)])
    service = service_on(consumer, agent, producer)
    await run_until(service, lambda: consumer.committed(TP) == 1, "it is committed")
    assert [json.loads(v)["text"] for _t, _k, v in producer.sent] == ["m0"]
    [span] = turn_spans(spans)
    if span.parent is not None:  # only a well-formed context is taken as the parent
        assert name.lower() == "traceparent" and value is not None
        assert f"{span.parent.trace_id:032x}".encode() in value.lower()


def test_log_lines_inside_a_span_carry_its_ids(spans: InMemorySpanExporter) -> None:
    """A JSON log line written while a turn's span is current has its trace_id and span_id;
    one written outside any span has neither."""
    formatter = JsonFormatter()

    def line() -> dict[str, Any]:
        record = logging.LogRecord("turnflow.x", logging.INFO, "", 0, "hello", None, None)
        return dict(json.loads(formatter.format(record)))

    assert "trace_id" not in line()
    with tracing.process_span([_Record()], group="g", conversation_id="a"):
        inside = line()
    [span] = spans.get_finished_spans()
    assert inside["trace_id"] == f"{span.context.trace_id:032x}"
    assert inside["span_id"] == f"{span.context.span_id:016x}"


@dataclasses.dataclass
class _Record:
    topic: str = "inbound.turns"
    partition: int = 0
    offset: int = 0
    key: bytes | None = b"a"
    headers: Any = ()


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, False),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://h:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
    ],
)
def test_only_a_configured_exporter_turns_tracing_on(environ: dict[str, str], on: bool) -> None:
    """Tracing is on exactly when the OTEL_* variables configure an exporter."""
    assert tracing.enabled_by(environ) is on


def test_without_otel_variables_set_up_installs_nothing() -> None:
    """With no OTEL_* variable, set-up turns nothing on, imports nothing of the SDK, and the
    hooks give no span, no headers and no log ids."""
    before = {m for m in sys.modules if m.startswith("opentelemetry.sdk")}
    assert tracing.configure({}) is False
    assert tracing._tracer is None and tracing._provider is None
    assert {m for m in sys.modules if m.startswith("opentelemetry.sdk")} == before
    assert tracing.send_options() == {}
    assert tracing.log_ids() is None
    with tracing.process_span([_Record()], group="g", conversation_id="a") as entered:
        assert entered is None


def test_an_exporter_turnflow_cannot_send_with_is_refused_with_a_reason() -> None:
    """A gRPC protocol or an unknown exporter name is refused with a one-line reason naming
    the variable, and tracing stays off."""
    with pytest.raises(TracingSettingsError, match="OTEL_EXPORTER_OTLP_PROTOCOL=grpc"):
        tracing.configure({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4317",
                           "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    with pytest.raises(TracingSettingsError, match="OTEL_TRACES_EXPORTER=zipkin"):
        tracing.configure({"OTEL_TRACES_EXPORTER": "zipkin"})
    assert tracing._tracer is None


def test_an_otlp_environment_builds_a_batch_exporting_provider() -> None:
    """``OTEL_EXPORTER_OTLP_ENDPOINT`` alone turns tracing on with the OTLP/HTTP exporter behind
    a batch processor, and the service name from ``OTEL_SERVICE_NAME``; shutdown turns it off."""
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SERVICE_NAME": "tf"}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OTEL_SERVICE_NAME", "tf")
        assert tracing.configure(environ) is True
    try:
        provider = tracing._provider
        assert provider is not None
        assert provider.resource.attributes["service.name"] == "tf"
        processors = provider._active_span_processor._span_processors
        assert [type(p).__name__ for p in processors] == ["BatchSpanProcessor"]
    finally:
        tracing.shutdown()
    assert tracing._tracer is None


@pytest.mark.parametrize("command", [["schedule"], ["relay"],
                                     ["consume", "--agent", "x:y", "--workers", "1"]])
def test_the_services_refuse_an_unusable_exporter_with_one_line(
    command: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``turnflow schedule``, ``relay`` and ``consume`` with OTEL_* variables asking for gRPC
    exit 2 with one line naming the variable, before connecting to anything."""
    from consumer import cli

    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    assert cli.main(command) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "OTEL_EXPORTER_OTLP_PROTOCOL=grpc" in err[0]
    assert tracing._tracer is None


def test_spans_reach_an_otlp_http_receiver_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With only ``OTEL_EXPORTER_OTLP_ENDPOINT`` and ``OTEL_SERVICE_NAME`` set, a turn's span is
    sent as OTLP/HTTP protobuf to ``<endpoint>/v1/traces`` by the time tracing shuts down, with
    its name, kind, attributes and the service name."""
    with otlp_receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "turnflow-test")
        assert tracing.start() is None
        try:
            with tracing.process_span([_Record(offset=9)], group="g", conversation_id="c1"):
                pass
        finally:
            tracing.shutdown()
    assert [path for path, _ in receiver.bodies] == ["/v1/traces"]
    [(service, span)] = receiver.spans()
    assert service["service.name"] == "turnflow-test"
    assert span.name == "process inbound.turns" and span.kind == span.SPAN_KIND_CONSUMER
    attributes = {a.key: a.value for a in span.attributes}
    assert attributes["gen_ai.conversation.id"].string_value == "c1"
    assert attributes["messaging.kafka.offset"].int_value == 9
