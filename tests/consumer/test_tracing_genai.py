"""Model calls as GenAI spans, the agent on every span of a turn, failed turns and dead
letters, and sampling: through the service on its doubles with a real engine agent, spans
into memory."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka.structs import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from consumer import tracing
from consumer.dead_letters import dead_letter_headers
from consumer.genai_attributes import call_attributes, span_name
from consumer.hosting.routing import Route, registry_router
from consumer.model_calls import observe_model_calls
from consumer.outbox import OutboxPublisher
from consumer.settings import Settings
from consumer.turns.pipeline import OutboundTopics, TurnPipeline
from consumer.turns.service import ConsumerService
from engine import Agent, ModelRequest, ModelResponse
from engine.definition import definition_digest
from engine.errors import ProviderError
from engine.providers.base import CallRecord, ChatMessage, ProviderHooks, ToolCall, Usage
from engine.providers.http import observed
from engine.recording import RecordingLevel, recorded_agent
from store import Store
from store.hosting import Hosting
from tests.consumer.fakes import FakeKafkaConsumer, FakeProducer, FakeStore
from tests.consumer.test_tracing import put
from tests.turns.test_service_bursts import message, message_with, run_until, service_on

TP = TopicPartition("inbound.turns", 0)
OTHER = TopicPartition("inbound.turns", 1)

FLOWS: list[dict[str, Any]] = [{
    "id": "order",
    "on": [{"message": ["order"]}],
    "steps": [{"id": "ask", "collect": ["size"], "prompt": "Ask the size."},
              {"id": "done", "say": "Size {{size}}."}],
}]
USAGE = Usage(input_tokens=120, output_tokens=9, cache_read_tokens=96, cache_write_tokens=24)


def _answer(request: ModelRequest) -> dict[str, Any]:
    """What a model would answer the order flow: the flow, and the size when said."""
    words = str(request.meta.get("message") or "").split()
    size = words[-1] if words and words[-1] in ("S", "M", "L") else None
    if request.schema_name == "speak":
        return {"message": "Which size?", "size": size}
    return {"flows": {"order": 90}, "fields": {"size": size}}


class ChatProvider:
    """A provider double that reports its calls as the HTTP providers do (``observed`` with
    the model asked for and the request), answering ``_answer`` with usage and the model that
    answered; ``fail`` raises instead for the calls it picks. Each call yields to the loop a
    few times, so calls of many conversations interleave."""

    def __init__(self, fail: Callable[[ModelRequest], BaseException | None] | None = None,
                 *, provider: str = "openai", model: str = "gpt-test") -> None:
        self.hooks = ProviderHooks()
        self._fail = fail
        self._provider = provider
        self.model = model

    async def generate(self, request: ModelRequest) -> ModelResponse:
        async def call() -> ModelResponse:
            for _ in range(3):
                await asyncio.sleep(0)
            error = self._fail(request) if self._fail else None
            if error is not None:
                raise error
            return ModelResponse(json=_answer(request), usage=USAGE,
                                 model=f"{self.model}-2026-01-01")

        return await observed(self.hooks, provider=self._provider,
                              schema_name=request.schema_name, call=call, model=self.model,
                              request=request)


def agent_with(provider: ChatProvider, name: str = "Bo") -> Agent:
    return Agent(name=name, provider=provider, flows=FLOWS, fields={"size": {"type": "string"}})


class Registry:
    """A router as the registry's: conversation ``sN`` is bound to agent ``agent-{N % 4}`` at
    version ``N % 4 + 1``, each agent prepared as the hosting prepares one."""

    def __init__(self, provider: ChatProvider) -> None:
        self.agents = [recorded_agent(agent_with(provider, f"Agent {n}")) for n in range(4)]
        for agent in self.agents:
            observe_model_calls(agent)

    async def route(self, parsed: Any, state: Any) -> Route:
        n = int(parsed.session_id[1:]) % 4
        return Route(agent=self.agents[n], agent_id=f"agent-{n}", version=n + 1, workspace="w")


def traced_service(consumer: FakeKafkaConsumer, agent: Any, producer: FakeProducer, *,
                   recording: RecordingLevel = "off", router: Any = None,
                   **settings_: Any) -> ConsumerService:
    """``service_on`` with a real engine agent prepared as the service's start prepares it
    (its provider's calls observed, its clock and provider recorded) and a pipeline recording
    at ``recording``, routing by ``router`` when given."""
    # The registry's service has no agent of its own: the doubles' set-up is given a stand-in,
    # and the pipeline below routes by the router.
    given = agent if agent is not None else object()
    if agent is not None:
        observe_model_calls(agent)
        agent = recorded_agent(agent)
    store = FakeStore()
    pipeline = TurnPipeline(
        store=store, agent=agent, router=router,  # type: ignore[arg-type]
        publisher=OutboxPublisher(store, producer),  # type: ignore[arg-type]
        topics=OutboundTopics(messages="out.m", schedule="out.s"), recording=recording,
    )
    return service_on(consumer, given, producer, store, pipeline,  # type: ignore[arg-type]
                      **settings_)


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_model_calls_are_client_spans_under_the_turn_span(
    spans: InMemorySpanExporter,
) -> None:
    """A turn that calls the model twice gives two CLIENT spans ``chat gpt-test``, children of
    the turn span in its trace and inside its time, with the GenAI attributes of each call,
    the conversation and the configured agent (its name as id, no version) on all three."""
    consumer, producer = FakeKafkaConsumer([TP]), FakeProducer()
    put(consumer, TP, message("a", "order please"))
    service = traced_service(consumer, agent_with(ChatProvider()), producer)
    await run_until(service, lambda: consumer.committed(TP) == 1, "it is committed")
    [turn] = named(spans, "process ")
    calls = named(spans, "chat")
    assert [attrs(c)["turnflow.model.call"] for c in calls] == ["understand", "speak"]
    agent = {"gen_ai.conversation.id": "a", "gen_ai.agent.id": "Bo", "gen_ai.agent.name": "Bo"}
    assert agent.items() <= attrs(turn).items() and "gen_ai.agent.version" not in attrs(turn)
    understand, speak = calls
    assert attrs(understand) == agent | {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.response.model": "gpt-test-2026-01-01",
        "gen_ai.output.type": "json",
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 9,
        "gen_ai.usage.cache_read.input_tokens": 96,
        "gen_ai.usage.cache_creation.input_tokens": 24,
        "turnflow.model.call": "understand",
    }
    assert attrs(speak)["gen_ai.output.type"] == "text"
    for call in calls:
        assert call.name == "chat gpt-test" and call.kind is SpanKind.CLIENT
        assert call.parent is not None and call.parent.span_id == turn.context.span_id
        assert call.context.trace_id == turn.context.trace_id
        assert call.status.status_code is StatusCode.UNSET
        assert call.start_time is not None and call.end_time is not None
        assert turn.start_time is not None and turn.end_time is not None
        assert turn.start_time <= call.start_time <= call.end_time <= turn.end_time


@pytest.mark.parametrize("level", ["off", "envelopes", "prompts"])
async def test_prompts_and_replies_are_on_spans_only_when_prompts_are_recorded(
    spans: InMemorySpanExporter, level: RecordingLevel,
) -> None:
    """With ``MODEL_RECORDING=prompts`` each call span holds the system instructions, the
    messages sent (the customer's words among them) and the reply, in the conventions'
    message shape; at ``off`` and ``envelopes`` no span holds any of the conversation's
    words."""
    consumer, producer = FakeKafkaConsumer([TP]), FakeProducer()
    put(consumer, TP, message("a", "order please, size M"))
    service = traced_service(consumer, agent_with(ChatProvider()), producer, recording=level)
    await run_until(service, lambda: consumer.committed(TP) == 1, "it is committed")
    every = spans.get_finished_spans()
    text = json.dumps([attrs(s) for s in every])
    calls = named(spans, "chat")
    assert len(calls) == 2
    if level != "prompts":
        assert "size M" not in text and "Which size" not in text
        for call in calls:
            assert not {"gen_ai.input.messages", "gen_ai.output.messages",
                        "gen_ai.system_instructions"} & attrs(call).keys()
        return
    for call in calls:
        sent = json.loads(attrs(call)["gen_ai.input.messages"])
        assert any(part.get("content", "").find("size M") >= 0
                   for entry in sent for part in entry["parts"])
        assert all(entry["role"] in ("user", "assistant", "tool", "system") for entry in sent)
        [system] = json.loads(attrs(call)["gen_ai.system_instructions"])
        assert system["type"] == "text" and system["content"]
        [reply] = json.loads(attrs(call)["gen_ai.output.messages"])
        assert reply["role"] == "assistant" and reply["finish_reason"] == "stop"
        envelope = json.loads(reply["parts"][0]["content"])
        assert envelope == _answer_for(attrs(call)["turnflow.model.call"], "order please, size M")


def _answer_for(kind: str, said: str) -> dict[str, Any]:
    return _answer(ModelRequest(schema_name=kind, system="", meta={"message": said}))


async def test_a_failed_call_and_a_dead_lettered_turn_are_errors_and_the_dlq_continues_the_trace(
    spans: InMemorySpanExporter,
) -> None:
    """A model call the provider refuses (fatal) is a call span with status ERROR and
    ``error.type``; the turn's input goes to the DLQ, the turn span gets status ERROR and the
    DLQ reason as ``error.type``, and the dead letter carries the turn span's context, the
    producer's own ``traceparent`` kept as ``original-traceparent``. The other conversation
    next to it is answered and its spans are fine."""
    def refuse(request: ModelRequest) -> BaseException | None:
        if "refuse" in str(request.meta.get("message")):
            return ProviderError("model provider refused", kind="fatal")
        return None

    consumer, producer = FakeKafkaConsumer([TP]), FakeProducer()
    parent = b"00-0000000000000000000000000000000a-000000000000000a-01"
    put(consumer, TP, message("bad", "order refuse"), [("traceparent", parent)])
    put(consumer, TP, message("good", "order please"))
    service = traced_service(consumer, agent_with(ChatProvider(refuse)), producer)
    await run_until(service, lambda: consumer.committed(TP) == 2, "both are committed")
    turns = {attrs(s)["gen_ai.conversation.id"]: s for s in named(spans, "process ")}
    bad, good = turns["bad"], turns["good"]
    assert bad.status.status_code is StatusCode.ERROR
    assert attrs(bad)["error.type"] == "provider-fatal"
    assert any(e.name == "exception" for e in bad.events)
    assert good.status.status_code is StatusCode.UNSET and "error.type" not in attrs(good)
    failed = [c for c in named(spans, "chat") if c.status.status_code is StatusCode.ERROR]
    assert failed and all(c.parent is not None and c.parent.span_id == bad.context.span_id
                          for c in failed)
    assert attrs(failed[0])["error.type"] == "ProviderError"
    assert attrs(failed[0])["turnflow.model.error_kind"] == "fatal"
    dlq = service.settings.dlq_topic
    [headers] = [dict(h) for (topic, _k, _v), h in zip(producer.sent, producer.headers,
                                                       strict=True) if topic == dlq]
    assert headers["traceparent"] == (
        f"00-{bad.context.trace_id:032x}-{bad.context.span_id:016x}-01".encode())
    assert headers["original-traceparent"] == parent
    assert headers["error"] == b"provider-fatal"


async def test_a_refused_record_has_a_failed_span_and_its_dead_letter_continues_it(
    spans: InMemorySpanExporter,
) -> None:
    """A record the parser refuses gets a span of its own with status ERROR and the refusal
    reason as ``error.type``; its dead letter carries that span's context."""
    consumer, producer = FakeKafkaConsumer([TP]), FakeProducer()
    put(consumer, TP, (b"x", b"{not json"))
    service = traced_service(consumer, agent_with(ChatProvider()), producer)
    await run_until(service, lambda: consumer.committed(TP) == 1, "it is committed")
    [span] = named(spans, "process ")
    assert span.status.status_code is StatusCode.ERROR
    [(topic, _key, _value)] = producer.sent
    [headers] = [dict(h) for h in producer.headers]
    assert topic == service.settings.dlq_topic
    assert attrs(span)["error.type"] == headers["error"].decode()
    assert "gen_ai.conversation.id" not in attrs(span)  # the record names no session
    assert headers["traceparent"].split(b"-")[2] == f"{span.context.span_id:016x}".encode()


async def test_many_conversations_at_once_each_span_is_its_own_turns(
    spans: InMemorySpanExporter,
) -> None:
    """Thirty-two conversations on two partitions through registry agents sharing one
    provider, calls interleaving: every model-call span is in its own turn's trace, under its
    own turn span, with that turn's conversation id and agent id and version."""
    consumer, producer = FakeKafkaConsumer([TP, OTHER]), FakeProducer()
    n_sessions = 32
    for n in range(n_sessions):
        put(consumer, TP if n % 2 else OTHER, message(f"s{n}", "order please"),
            [("traceparent", f"00-{n + 1:032x}-{n + 1:016x}-01".encode())])
    registry = Registry(ChatProvider())
    service = traced_service(consumer, None, producer, router=registry)
    half = n_sessions // 2
    await run_until(service, lambda: consumer.committed(TP) == half
                    and consumer.committed(OTHER) == half, "all are committed")
    turns = {s.context.span_id: s for s in named(spans, "process ")}
    assert len(turns) == n_sessions
    for turn in turns.values():
        n = int(attrs(turn)["gen_ai.conversation.id"][1:])
        assert turn.context.trace_id == n + 1
        assert attrs(turn)["gen_ai.agent.id"] == f"agent-{n % 4}"
        assert attrs(turn)["gen_ai.agent.version"] == str(n % 4 + 1)
    calls = named(spans, "chat")
    assert len(calls) == 2 * n_sessions
    for call in calls:
        assert call.parent is not None
        turn = turns[call.parent.span_id]
        n = int(attrs(turn)["gen_ai.conversation.id"][1:])
        assert call.context.trace_id == turn.context.trace_id == n + 1
        for key in ("gen_ai.conversation.id", "gen_ai.agent.id", "gen_ai.agent.version",
                    "gen_ai.agent.name"):
            assert attrs(call)[key] == attrs(turn)[key]


@pytest.mark.parametrize(("sampler", "arg"), [("always_off", None), ("traceidratio", "0.5"),
                                              ("parentbased_traceidratio", "0.5")])
async def test_the_sampler_of_the_environment_is_honoured(
    monkeypatch: pytest.MonkeyPatch, sampler: str, arg: str | None,
) -> None:
    """Tracing set up from the OTEL_* variables with ``OTEL_TRACES_SAMPLER`` (and ``_ARG``):
    every turn is still answered and committed; a turn sampled out exports no span at all
    (nor its model calls) and its reply's ``traceparent`` says not sampled (flag bit 0 clear); one
    sampled in exports its turn and call spans and its reply says sampled."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    if arg is not None:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", arg)
    assert tracing.start() is None
    exporter = InMemorySpanExporter()
    assert tracing._provider is not None
    tracing._provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        consumer, producer = FakeKafkaConsumer([TP, OTHER]), FakeProducer()
        for n in range(40):
            put(consumer, TP if n % 2 else OTHER, message(f"s{n}", "order please"))
        service = traced_service(consumer, agent_with(ChatProvider()), producer)
        await run_until(service, lambda: consumer.committed(TP) == 20
                        and consumer.committed(OTHER) == 20, "all are committed")
        exported = exporter.get_finished_spans()
    finally:
        tracing.shutdown()
    sampled_traces = {s.context.trace_id for s in exported}
    replies = [(json.loads(v)["session_id"], dict(h)["traceparent"].decode())
               for (_t, _k, v), h in zip(producer.sent, producer.headers, strict=True)]
    assert sorted(session for session, _ in replies) == sorted(f"s{n}" for n in range(40))
    sampled_flags = set()
    for _session, traceparent in replies:
        _version, trace_id, _span, flags = traceparent.split("-")
        sampled = bool(int(flags, 16) & 1)  # the W3C "sampled" bit
        sampled_flags.add(sampled)
        assert sampled == (int(trace_id, 16) in sampled_traces)
    if sampler == "always_off":
        assert list(exported) == [] and sampled_flags == {False}
    else:
        # 40 turns at one half: some of each, but for a 2^-39 chance.
        assert sampled_flags == {False, True}
    for trace_id in sampled_traces:
        in_trace = [s for s in exported if s.context.trace_id == trace_id]
        assert sorted(s.name.split(" ")[0] for s in in_trace) == ["chat", "chat", "process"]


@settings(max_examples=150, deadline=None)
@given(
    words=st.lists(st.text(max_size=60), max_size=4),
    reply=st.one_of(st.text(max_size=60), st.none()),
    envelope=st.one_of(st.none(), st.dictionaries(st.text(max_size=8),
                                                  st.one_of(st.text(max_size=20), st.integers(),
                                                            st.none()), max_size=4)),
    model=st.one_of(st.none(), st.text(max_size=20)),
    prompts=st.booleans(),
    ok=st.booleans(),
)
def test_any_prompt_reply_or_model_name_gives_plain_attributes(
    words: list[str], reply: str | None, envelope: dict[str, Any] | None, model: str | None,
    prompts: bool, ok: bool,
) -> None:
    """Whatever words a conversation, a model's reply or a model name hold, a call's
    attributes are built without raising, every value a str or int (what a span takes), and
    with prompts the JSON texts give the words back; without prompts none of them is there."""
    messages = [ChatMessage(role="user" if i % 2 == 0 else "assistant", text=w)
                for i, w in enumerate(words)]
    looked = ToolCall(id="t1", name="look", arguments={"q": reply})
    messages.append(ChatMessage(role="assistant", text="", tool_calls=[looked]))
    messages.append(ChatMessage(role="tool", text=reply or "", tool_call_id="t1"))
    request = ModelRequest(schema_name="understand", system="sys", messages=messages)
    response = ModelResponse(text=reply or "", json=envelope, model=model) if ok else None
    record = CallRecord(provider="openai", schema_name="understand", duration_s=0.1, ok=ok,
                        model=model, request=request, response=response,
                        error_kind=None if ok else "retryable",
                        error_type=None if ok else "TimeoutError")
    got = call_attributes(record, prompts=prompts)
    assert all(isinstance(v, str | int) and not isinstance(v, bool) for v in got.values())
    assert span_name(record) == (f"chat {model}" if model else "chat")
    if not ok:
        assert got["error.type"] == "TimeoutError"
    if not prompts:
        assert not {"gen_ai.input.messages", "gen_ai.output.messages"} & got.keys()
        return
    sent = json.loads(got["gen_ai.input.messages"])
    texts = [p["content"] for m in sent for p in m["parts"] if p["type"] == "text"]
    assert texts == [w for w in words if w]
    assert sent[-1]["parts"] == [{"type": "tool_call_response", "id": "t1",
                                  "response": reply or ""}]
    if ok:
        [out] = json.loads(got["gen_ai.output.messages"])
        if reply:
            assert out["parts"][0]["content"] == reply


@settings(max_examples=150, deadline=None)
@given(theirs=st.lists(st.tuples(st.sampled_from(["traceparent", "TraceParent", "tracestate",
                                                  "error", "x"]),
                                 st.binary(max_size=20)), max_size=5))
def test_a_dead_letter_has_one_trace_context_the_turns(
    theirs: list[tuple[str, bytes]],
) -> None:
    """Whatever trace headers a producer set, a dead letter sent inside a span has exactly one
    ``traceparent`` (the span's) and one ``tracestate`` at most, the producer's kept under
    ``original-``; without a span's context the producer's headers pass as they were."""
    @dataclasses.dataclass
    class Record:
        topic: str = "in"
        partition: int = 0
        offset: int = 3
        key: bytes | None = b"k"
        value: bytes | None = b"v"
        headers: Any = None

    record = Record(headers=theirs)
    trace = [("traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01")]
    own, kept = dead_letter_headers(record, "bad-json", "d", trace)
    names = [name.lower() for name, _ in [*own, *kept]]
    assert names.count("traceparent") == 1 and names.count("error") == 1
    assert "tracestate" not in names  # the producer's state is not the span's
    assert dict(own)["traceparent"] == trace[0][1]
    own, kept = dead_letter_headers(record, "bad-json", "d")
    assert [(n, v) for n, v in kept] == [
        (f"original-{n}" if n == "error" else n, v) for n, v in theirs]


async def test_a_retried_attempt_is_an_event_and_the_turn_span_stays_ok(
    spans: InMemorySpanExporter,
) -> None:
    """A model call that fails retryably once and then answers: the turn is answered, its span
    holds the failure as an ``exception`` event with the retry's reason and keeps status OK
    (unset); the failed call is an ERROR call span in the same trace, the later calls fine."""
    failures = iter([ProviderError("timed out", kind="retryable")])

    def once(request: ModelRequest) -> BaseException | None:
        return next(failures, None)

    consumer, producer = FakeKafkaConsumer([TP]), FakeProducer()
    put(consumer, TP, message("a", "order please"))
    service = traced_service(consumer, agent_with(ChatProvider(once)), producer,
                             retry_backoff_ms=1)
    await run_until(service, lambda: consumer.committed(TP) == 1, "it is committed")
    assert [json.loads(v)["text"] for t, _k, v in producer.sent if t == "out.m"] == [
        "Which size?"]
    [turn] = named(spans, "process ")
    assert turn.status.status_code is StatusCode.UNSET and "error.type" not in attrs(turn)
    [event] = [e for e in turn.events if e.name == "exception"]
    assert (event.attributes or {})["turnflow.attempt.decision"] == "provider-retryable"
    calls = named(spans, "chat")
    assert [c.status.status_code for c in calls] == [
        StatusCode.ERROR, StatusCode.UNSET, StatusCode.UNSET]
    assert all(c.context.trace_id == turn.context.trace_id for c in calls)
    assert attrs(calls[0])["turnflow.model.error_kind"] == "retryable"


DEMO = json.loads((Path(__file__).resolve().parents[2] / "examples/agents/demo.json").read_text())


async def test_registry_agents_from_the_database_name_their_id_and_version(
    store: Store, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the service's registry router (agents stored in PostgreSQL, prepared as the
    service prepares them), conversations of two agents at once: each turn span and each of
    its model-call spans names its own conversation, its agent's id and the version the
    conversation ran on."""
    for name in ("TURNFLOW_MODEL_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL",
                 "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)  # the offline rules answer
    hosting = Hosting(store.engine)
    tag = uuid.uuid4().hex[:6]
    workspace = f"acme-{tag}"
    agents = [f"demo-{tag}-{n}" for n in range(2)]
    for agent_id in agents:
        document = copy.deepcopy(DEMO) | {"agent_id": agent_id, "workspace": workspace}
        await hosting.put_version(agent_id=agent_id, workspace=workspace, document=document,
                                  digest=definition_digest(document), activate=True)
    # The second agent's live version is its second one.
    second = copy.deepcopy(DEMO) | {"agent_id": agents[1], "workspace": workspace,
                                    "name": "Demo two"}
    await hosting.put_version(agent_id=agents[1], workspace=workspace, document=second,
                              digest=definition_digest(second), activate=True)
    await hosting.set_workspace(workspace, agents_enabled=True)
    settings_ = Settings(kafka_bootstrap_servers="127.0.0.1:1", agent_registry=True,
                         packs="examples.demo_pack:pack", agent_refresh_ms=0)
    router = registry_router(settings_, store)
    consumer, producer = FakeKafkaConsumer([TP, OTHER]), FakeProducer()
    for n in range(12):
        put(consumer, TP if n % 2 else OTHER,
            message_with(f"s{n}", "I want to book brakes on friday", agent_id=agents[n % 2]))
    service = traced_service(consumer, None, producer, router=router)
    await run_until(service, lambda: consumer.committed(TP) == 6
                    and consumer.committed(OTHER) == 6, "all are committed")
    turns = {s.context.span_id: s for s in named(spans, "process ")}
    assert len(turns) == 12
    for turn in turns.values():
        n = int(attrs(turn)["gen_ai.conversation.id"][1:])
        assert attrs(turn)["gen_ai.agent.id"] == agents[n % 2]
        assert attrs(turn)["gen_ai.agent.version"] == str(n % 2 + 1)
    calls = named(spans, "chat")
    assert calls
    for call in calls:
        assert call.parent is not None
        turn = turns[call.parent.span_id]
        assert attrs(call)["gen_ai.provider.name"] == "rules"
        for key in ("gen_ai.conversation.id", "gen_ai.agent.id", "gen_ai.agent.version"):
            assert attrs(call)[key] == attrs(turn)[key]


def test_every_gen_ai_name_is_one_the_pinned_conventions_define() -> None:
    """Every ``gen_ai.*`` attribute a call span or a turn span can carry is a name of the
    pinned GenAI conventions (the ``opentelemetry-semantic-conventions`` package's), and
    ``chat`` is one of its operation names: a rename upstream fails here, not in a backend."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as pinned

    defined = {value for value in vars(pinned).values() if isinstance(value, str)}
    request = ModelRequest(schema_name="speak", system="s",
                           messages=[ChatMessage(role="user", text="oi")])
    response = ModelResponse(text="olá", model="m-1")
    record = CallRecord(provider="openai", schema_name="speak", duration_s=0.1, ok=False,
                        error_kind="fatal", error_type="ProviderError", usage=USAGE,
                        model="m", request=request, response=response)
    names = set(call_attributes(record, prompts=True)) | {
        "gen_ai.conversation.id", "gen_ai.agent.id", "gen_ai.agent.version", "gen_ai.agent.name"}
    assert {n for n in names if n.startswith("gen_ai.")} <= defined
    assert {n for n in names if not n.startswith("gen_ai.")} == {
        "error.type", "turnflow.model.call", "turnflow.model.error_kind"}
    assert pinned.GenAiOperationNameValues.CHAT.value == "chat"
    assert {"text", "json"} <= {v.value for v in pinned.GenAiOutputTypeValues}
