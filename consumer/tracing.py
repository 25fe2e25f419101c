"""OpenTelemetry traces of the turns: the one module that touches OpenTelemetry.

Off unless an exporter is configured by the standard variables: ``OTEL_EXPORTER_OTLP_ENDPOINT``
or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` set, or ``OTEL_TRACES_EXPORTER`` set to something
other than ``none``. Off, nothing of the SDK is imported and every hook below is one check of a
module global: a turn costs what it cost without tracing.

On (``configure``), a ``TracerProvider`` built from the environment (so ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_TRACES_SAMPLER``/``_ARG`` apply) sends spans through a
``BatchSpanProcessor`` to the OTLP/HTTP exporter (``otlp``, which reads its own
``OTEL_EXPORTER_OTLP_*`` variables) or to stdout (``console``). The provider flushes and shuts
down when the process exits; ``shutdown`` does it earlier.

The hooks:

- ``process_span``: the CONSUMER span of one turn, ``process <topic>``, with the messaging
  semantic conventions and ``gen_ai.conversation.id``. A valid W3C ``traceparent`` (and
  ``tracestate``) header on the record is its parent; an invalid or absent one gives a new
  root. A burst (several records answered by one turn) is parented by its last record and
  linked to every record that carried a context, as the messaging conventions say for batches.
- ``send_options``: the ``headers=`` of a record published while a span is current
  (``traceparent``/``tracestate``), so a reply or timer continues the turn's trace.
- ``log_ids``: ``trace_id``/``span_id`` for the JSON log lines written inside a span.
- ``note_agent``: the agent that answers the turn (``gen_ai.agent.id``/``.version``/``.name``),
  once routing has chosen it, on the turn span and on every model-call span after it.
- ``model_call_span``: a provider hook (``engine.ProviderHooks``) turning each model call's
  ``CallRecord`` into a CLIENT span ``chat <model>``, a child of the turn span, timed by the
  record's duration, with the GenAI semantic conventions (``genai_attributes``); the prompt
  and the reply only when the turn records prompts (``MODEL_RECORDING=prompts``).
- ``fail_turn``: the turn span's status ERROR with ``error.type`` (the reason its input went
  to the dead-letter topic); ``note_failed_attempt``: an attempt that failed before a retry or
  the fallback message, as an ``exception`` event.
- ``current_context``: the current span's context as text, stored with what a turn writes for
  later (its outbox rows, its turn-log row), so a row sent after a crash or behind an older
  one still carries the context of the turn that wrote it.
- ``record_context``: the well-formed context on a consumed record's headers, normalised (the
  scheduler stores it with the timer the record sets).
- ``stored_options``: the ``headers=`` for a row sent with its stored context (a later turn).
- ``resend_span``: the relay's PRODUCER span of one re-sent row, a child of the stored context
  of the turn that wrote it, whose context the record carries.
- ``wake_span``: the scheduler's PRODUCER span of one wake: a new trace linked to the turn
  that set the timer, whose context the wake record carries, so the wake's turn is its child.

Headers come from producers: each is decoded leniently and the W3C parser refuses what is not a
trace context, so no header value can make a turn fail.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from consumer.errors import TracingSettingsError
from consumer.genai_attributes import call_attributes, span_name
from engine.providers.base import CallRecord
from engine.recording import recording_level

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

__all__ = [
    "TRACE_HEADERS",
    "InboundRecord",
    "SendSpan",
    "configure",
    "current_context",
    "enabled_by",
    "fail_turn",
    "log_ids",
    "model_call_span",
    "note_agent",
    "note_failed_attempt",
    "process_span",
    "record_context",
    "resend_span",
    "send_options",
    "shutdown",
    "start",
    "stored_options",
    "wake_span",
]

TRACE_HEADERS = ("traceparent", "tracestate")
"""The W3C trace-context headers read from inbound records and written on outbound ones."""

_NO_OPTIONS: dict[str, Any] = {}

# Set by ``configure``; None while tracing is off (what every hook checks first).
_tracer: Tracer | None = None
_provider: TracerProvider | None = None

# The attributes every span of the current turn carries (the conversation, then the agent once
# routed), shared by the turn span and the model-call spans made inside it; None outside one.
_TURN: ContextVar[dict[str, Any] | None] = ContextVar("turnflow_trace_turn", default=None)
# ``_TURN`` of a turn the sampler left out (compared by identity, never written).
_UNSAMPLED: dict[str, Any] = {}


class InboundRecord(Protocol):
    """What a span needs of a consumed record (aiokafka's ``ConsumerRecord``)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    headers: Any


def enabled_by(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` configures a trace exporter (the standard OTEL_* variables)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    )


def configure(
    environ: Mapping[str, str] | None = None, *, provider: TracerProvider | None = None
) -> bool:
    """Turn tracing on when ``environ`` (default ``os.environ``) configures an exporter, or with
    the given ``provider`` (tests: one with an in-memory exporter); True when on. Raises
    ``TracingSettingsError`` for an exporter or protocol this build cannot send with."""
    global _tracer, _provider
    if provider is None:
        env = os.environ if environ is None else environ
        if not enabled_by(env):
            return False
        provider = _provider_from(env)
    _provider = provider
    _tracer = provider.get_tracer("turnflow")
    return True


def start() -> str | None:
    """``configure`` from ``os.environ`` for a service's start: None, or the one-line reason
    the OTEL_* variables cannot be used (for the CLI to print, exit 2)."""
    try:
        configure()
    except TracingSettingsError as exc:
        return str(exc)
    return None


def shutdown() -> None:
    """Flush the spans still queued and turn tracing off (the exit does it too)."""
    global _tracer, _provider
    provider, _provider, _tracer = _provider, None, None
    if provider is not None:
        provider.shutdown()


def _provider_from(env: Mapping[str, str]) -> TracerProvider:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    exporters: list[SpanExporter] = []
    for name in [n for n in names if n and n != "none"]:
        if name == "otlp":
            protocol = env.get(
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
            ).strip().lower() or "http/protobuf"
            if protocol != "http/protobuf":
                raise TracingSettingsError(
                    f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported: turnflow sends "
                    "traces over OTLP/HTTP (http/protobuf, port 4318)"
                )
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter())
        elif name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            exporters.append(ConsoleSpanExporter())
        else:
            raise TracingSettingsError(
                f"OTEL_TRACES_EXPORTER={name} is not supported: use otlp, console or none"
            )
    # Resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) and sampler (OTEL_TRACES_SAMPLER)
    # come from the environment; the provider flushes and shuts down at exit.
    provider = TracerProvider()
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _text(value: Any) -> str | None:
    """A header value as text, whatever bytes a producer put there (None: no usable value)."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def _carrier(headers: Any) -> dict[str, str]:
    """The trace-context headers of a record as the W3C propagator reads them."""
    found: dict[str, str] = {}
    try:
        for name, value in headers or ():
            if isinstance(name, str) and name.lower() in TRACE_HEADERS:
                text = _text(value)
                if text is not None:
                    found.setdefault(name.lower(), text)
    except (TypeError, ValueError):  # not a sequence of pairs: no context
        return {}
    return found


@contextlib.contextmanager
def _span(
    records: Sequence[InboundRecord], group: str | None, conversation_id: str
) -> Iterator[None]:
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanKind
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    assert _tracer is not None
    propagator = TraceContextTextMapPropagator()
    last = records[-1]
    contexts = [propagator.extract(_carrier(r.headers)) for r in records]
    links = []
    if len(records) > 1:
        for context in contexts:
            linked = trace.get_current_span(context).get_span_context()
            if linked.is_valid:
                links.append(Link(linked))
    attributes: dict[str, Any] = {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": last.topic,
        "messaging.destination.partition.id": str(last.partition),
        "messaging.kafka.offset": last.offset,
    }
    if conversation_id:  # a refused record may name none
        attributes["gen_ai.conversation.id"] = conversation_id
    if group:
        attributes["messaging.consumer.group.name"] = group
    if last.key is not None:
        attributes["messaging.kafka.message.key"] = last.key.decode("utf-8", "replace")
    if len(records) > 1:
        attributes["messaging.batch.message_count"] = len(records)
    with _tracer.start_as_current_span(
        f"process {last.topic}",
        context=contexts[-1],
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
    ) as span:
        # A turn sampled out records nothing: its model calls make no span either.
        turn = _UNSAMPLED
        if span.is_recording():
            turn = {"gen_ai.conversation.id": conversation_id} if conversation_id else {}
        token = _TURN.set(turn)
        try:
            yield
        finally:
            _TURN.reset(token)


def process_span(
    records: Sequence[InboundRecord], *, group: str | None, conversation_id: str
) -> contextlib.AbstractContextManager[None]:
    """The span of one turn answering ``records`` (one, or a burst in offset order), current
    for everything the turn does inside it; a no-op context while tracing is off."""
    if _tracer is None or not records:
        return contextlib.nullcontext()
    return _span(records, group, conversation_id)


def send_options() -> dict[str, Any]:
    """``headers=`` for a record sent now: the current span's ``traceparent``/``tracestate``;
    empty (no keyword at all) while tracing is off or no span is current."""
    if _tracer is None:
        return _NO_OPTIONS
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    if not carrier:
        return _NO_OPTIONS
    return {"headers": [(name, value.encode("ascii")) for name, value in carrier.items()]}


def log_ids() -> dict[str, str] | None:
    """``trace_id`` and ``span_id`` (hex) of the current span, for a log line; None when
    tracing is off or no span is current."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


def note_agent(agent_id: str | None, version: int | None, agent: Any = None) -> None:
    """Name the agent answering the current turn on its span and on the model-call spans made
    after it: ``gen_ai.agent.id`` (a registry agent's id; a configured agent's lifecycle id,
    else its name), ``gen_ai.agent.version`` (a registry agent's version; a configured agent
    has none) and ``gen_ai.agent.name`` (the ``agent``'s name), each only when known; nothing
    while tracing is off or outside a turn."""
    if _tracer is None:
        return
    name = getattr(agent, "name", None)
    turn = _TURN.get()
    if turn is None or turn is _UNSAMPLED:
        return
    from opentelemetry import trace

    noted: dict[str, Any] = {}
    if agent_id:
        noted["gen_ai.agent.id"] = agent_id
    if version is not None:
        noted["gen_ai.agent.version"] = str(version)
    if isinstance(name, str) and name:
        noted["gen_ai.agent.name"] = name
    turn.update(noted)
    trace.get_current_span().set_attributes(noted)


def fail_turn(reason: str, error: BaseException | None = None) -> None:
    """Mark the current turn span failed: status ERROR, ``error.type`` the ``reason`` (a DLQ
    reason code), and the exception that caused it, when one did, as its event."""
    if _tracer is None:
        return
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    span = trace.get_current_span()
    span.set_attribute("error.type", reason)
    if error is not None:
        span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, reason))


def note_failed_attempt(reason: str, error: BaseException | None) -> None:
    """An attempt of the current turn failed and the turn goes on (a retry, or the fallback
    message): the error as an ``exception`` event on its span, with
    ``turnflow.attempt.decision`` the decision's reason; the span's status is left alone."""
    if _tracer is None or error is None:
        return
    from opentelemetry import trace

    trace.get_current_span().record_exception(
        error, attributes={"turnflow.attempt.decision": reason}
    )


def model_call_span(record: CallRecord) -> None:
    """The CLIENT span of one model call just made (a provider hook), ending now and starting
    ``record.duration_s`` before, under the current span (the turn's); none when the turn was
    sampled out. Prompt and reply are on it only when the open recording tape keeps
    prompts."""
    if _tracer is None:
        return
    turn = _TURN.get()
    if turn is _UNSAMPLED:
        return
    from opentelemetry.trace import SpanKind, Status, StatusCode

    end = time.time_ns()
    start = end - max(0, int(record.duration_s * 1e9))
    attributes = call_attributes(record, prompts=recording_level() == "prompts")
    if turn:
        attributes.update(turn)
    span = _tracer.start_span(
        span_name(record), kind=SpanKind.CLIENT, attributes=attributes, start_time=start
    )
    if not record.ok:
        span.set_status(Status(StatusCode.ERROR, record.error_type or record.error_kind))
    span.end(end_time=end)
TraceContext = tuple[str, str | None]
"""A W3C context as text: (``traceparent``, ``tracestate`` or None)."""


def current_context() -> TraceContext | None:
    """The current span's ``traceparent`` and ``tracestate``, to store with what a turn writes;
    None while tracing is off or no span is current."""
    if _tracer is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return _pair(carrier)


def _pair(carrier: Mapping[str, str]) -> TraceContext | None:
    parent = carrier.get("traceparent")
    return None if parent is None else (parent, carrier.get("tracestate") or None)


def _normalised(carrier: Mapping[str, str]) -> TraceContext | None:
    """The context ``carrier`` holds, as the W3C propagator writes it back; None when it holds
    none that parses (whatever text it was: the parser refuses, never raises)."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    propagator = TraceContextTextMapPropagator()
    try:
        context = propagator.extract(carrier)
        if not trace.get_current_span(context).get_span_context().is_valid:
            return None
        out: dict[str, str] = {}
        propagator.inject(out, context)
    except (ValueError, TypeError, UnicodeError):
        return None
    if not out.get("traceparent", "").isascii() or not out.get("tracestate", "").isascii():
        return None
    return _pair(out)


def record_context(record: Any) -> TraceContext | None:
    """The well-formed trace context on a consumed record's headers, normalised; None while
    tracing is off (the record is not even looked at), or when its headers hold none (any
    bytes: refused, never raised)."""
    if _tracer is None:
        return None
    carrier = _carrier(getattr(record, "headers", None))
    if "traceparent" not in carrier:
        return None
    return _normalised(carrier)


def _stored_carrier(traceparent: Any, tracestate: Any) -> dict[str, str]:
    carrier: dict[str, str] = {}
    parent, state = _text(traceparent), _text(tracestate)
    if parent is not None:
        carrier["traceparent"] = parent
        if state is not None:
            carrier["tracestate"] = state
    return carrier


def stored_options(traceparent: Any, tracestate: Any) -> dict[str, Any]:
    """``headers=`` for a row sent with the context stored with it (the turn that wrote it);
    empty while tracing is off or when what is stored is not a well-formed context."""
    if _tracer is None or traceparent is None:
        return _NO_OPTIONS
    pair = _normalised(_stored_carrier(traceparent, tracestate))
    if pair is None:
        return _NO_OPTIONS
    return {"headers": _headers(pair)}


def _headers(pair: TraceContext) -> list[tuple[str, bytes]]:
    parent, state = pair
    headers = [("traceparent", parent.encode("ascii"))]
    if state:
        headers.append(("tracestate", state.encode("ascii")))
    return headers


class SendSpan:
    """One PRODUCER span of a send: ``headers`` go on the record (its context), ``end``
    closes the span once the broker answered (with the error, if it refused)."""

    __slots__ = ("_span", "headers")

    def __init__(self, span: Any, headers: list[tuple[str, bytes]]) -> None:
        self._span = span
        self.headers = headers

    def end(self, error: BaseException | None = None) -> None:
        """Close the span; a refused send marks it an error with the exception's type."""
        if error is not None:
            from opentelemetry.trace import Status, StatusCode

            self._span.set_attribute("error.type", type(error).__name__)
            self._span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        self._span.end()


def _stored_context(traceparent: Any, tracestate: Any) -> Any:
    """The stored context as an OpenTelemetry ``Context`` holding it (an empty one when what is
    stored is not a well-formed W3C context: the parser refuses it, never raises)."""
    from opentelemetry.context import Context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    if traceparent is None:
        return Context()
    try:
        return TraceContextTextMapPropagator().extract(_stored_carrier(traceparent, tracestate))
    except (ValueError, TypeError, UnicodeError):
        return Context()


def _send_span(name: str, context: Any, links: list[Any], attributes: dict[str, Any]) -> SendSpan:
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    assert _tracer is not None
    span = _tracer.start_span(
        name, context=context, kind=SpanKind.PRODUCER, links=links, attributes=attributes
    )
    out: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(out, trace.set_span_in_context(span))
    pair = _pair(out)
    return SendSpan(span, _headers(pair) if pair is not None else [])


def _send_attributes(topic: str, session_id: str) -> dict[str, Any]:
    return {
        "messaging.system": "kafka",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": topic,
        "messaging.kafka.message.key": session_id,
        "gen_ai.conversation.id": session_id,
    }


def resend_span(
    *, topic: str, session_id: str, traceparent: Any, tracestate: Any
) -> SendSpan | None:
    """The PRODUCER span ``send <topic>`` of a row the relay sends: a child of the context
    stored with it (the turn that wrote it), or a new trace when none is stored (written while
    tracing was off); None while tracing is off."""
    if _tracer is None:
        return None
    return _send_span(
        f"send {topic}", _stored_context(traceparent, tracestate), [],
        {**_send_attributes(topic, session_id), "turnflow.outbox.resend": True},
    )


def wake_span(
    *, topic: str, session_id: str, timer_key: str, traceparent: Any, tracestate: Any
) -> SendSpan | None:
    """The PRODUCER span ``send <topic>`` of a timer's wake: a new trace (the wake's turn is a
    turn of its own), linked to the stored context of the turn that set the timer when it is a
    well-formed one; None while tracing is off."""
    if _tracer is None:
        return None
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Link

    setter = trace.get_current_span(_stored_context(traceparent, tracestate)).get_span_context()
    links = [Link(setter)] if setter.is_valid else []
    return _send_span(
        f"send {topic}", Context(),  # a root: never the current span's child
        links, {**_send_attributes(topic, session_id), "turnflow.timer.key": timer_key},
    )
