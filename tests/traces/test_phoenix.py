"""A demo conversation's traces in a real trace store: Arize Phoenix, started by the test.

Five conversations run at once through the real consumer and scheduler (PostgreSQL and the
broker of the integration tests), traced by nothing but the standard ``OTEL_*`` variables
pointing at Phoenix over OTLP/HTTP. Each conversation sends a message whose model call is held,
then two more that wait behind it and are answered together as a burst, then stays quiet until
its silence timer fires through the scheduler and the agent nudges. Every message carries an
adapter's ``traceparent``. The spans are then read back through Phoenix's REST API.

Phoenix keeps neither a span's OTLP kind nor its links, so those two are read from the very
OTLP requests Phoenix accepted (``OtlpTap``, a relay in front of it); everything else comes
from Phoenix.

The demo runs once per module (Phoenix too); each test checks one part of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from consumer import tracing
from consumer.scheduler.service import FiringOptions
from engine import Agent
from engine.providers.openai import OpenAIProvider
from store import Store
from tests.fixtures.broker import TopicFactory
from tests.fixtures.phoenix_server import OtlpTap, Phoenix, TappedSpan, running_phoenix
from tests.fixtures.servers import servers_unavailable
from tests.fixtures.stand_in_model import last_customer_words, reply_for
from tests.integration.harness import (
    INBOUND,
    ServiceSetup,
    running_consumer,
    service_topics,
    wait_until,
)
from tests.integration.test_scheduler_e2e import running_scheduler

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

PROJECT = "turnflow-demo"
CONVERSATIONS = 5
SILENCE_MS = 1500
NUDGE = "Still there?"
MODEL = "stand-in"
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("TURNFLOW_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "traces"


class HeldModel:
    """An OpenAI-compatible chat-completions endpoint in the test's event loop, answering as
    the stand-in model does (``echo: <the customer's last line>``), so the agent's real
    OpenAI provider makes real HTTP calls. A request whose customer words start with ``hold``
    waits for ``release``, so the next messages queue behind its turn."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls: list[str] = []
        self.url = ""

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[HeldModel]:
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        try:
            yield self
        finally:
            self.release.set()
            server.close()
            await server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            length = next((int(line.split(":", 1)[1]) for line in head.split("\r\n")
                           if line.lower().startswith("content-length:")), 0)
            body = json.loads(await reader.readexactly(length)) if length else {}
            said = last_customer_words(body)
            self.calls.append(said)
            if said.startswith("hold"):
                await self.release.wait()
            data = json.dumps({
                "id": "held", "object": "chat.completion", "model": MODEL,
                "choices": [{"index": 0, "finish_reason": "stop", "message": {
                    "role": "assistant", "content": reply_for(body, None, None)}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                         % (len(data), data))
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def demo_agent(model: HeldModel) -> Agent:
    """Answers with the model and nudges once the customer has been quiet ``SILENCE_MS``."""
    provider = OpenAIProvider(api_key="test", model=MODEL, base_url=model.url, timeout=60.0,
                              env={})
    return Agent(
        name="Demo", provider=provider, idle="Answer the customer.",
        # Once: a flow that may repeat re-arms its silence timer after each nudge, and a second
        # nudge's turn could land before the demo's spans are flushed.
        flows=[{"id": "nudge", "on": [{"silence": SILENCE_MS}], "repeat": "once",
                "steps": [{"id": "n", "say": NUDGE}]}],
    )


@dataclass(frozen=True)
class Adapter:
    """The span of the adapter that produced one inbound message; a ``broken`` one sends a
    ``traceparent`` that is no trace context (its ids are then not on the wire)."""

    trace_id: str
    span_id: str
    broken: bool = False

    @classmethod
    def new(cls, *, broken: bool = False) -> Adapter:
        return cls(secrets.token_hex(16), secrets.token_hex(8), broken)

    @property
    def traceparent(self) -> bytes:
        if self.broken:
            return b"00-" + self.trace_id.encode() + b"-\xff\xfe-01"
        return f"00-{self.trace_id}-{self.span_id}-01".encode()


@dataclass
class Demo:
    """What the demo sent and what Phoenix and the tap hold afterwards."""

    phoenix: Phoenix
    inbound: str  # the inbound topic (a fresh one per test run)
    sessions: list[str]
    adapters: dict[str, list[Adapter]]  # per session: hold, then the burst's two
    replies: dict[str, list[str]]
    model_calls: int  # how many calls the model answered
    reply_parents: dict[str, list[str]]  # per session, each reply's traceparent, in order
    spans: list[dict[str, Any]]  # Phoenix's, attributes flattened
    tapped: dict[str, TappedSpan] = field(default_factory=dict)  # by span id

    @property
    def turn_name(self) -> str:
        """The name of a turn span: ``process inbound.turns`` on the default topic."""
        return f"process {self.inbound}"

    def by_id(self) -> dict[str, dict[str, Any]]:
        return {s["context"]["span_id"]: s for s in self.spans}

    def turns(self, session: str) -> list[dict[str, Any]]:
        """The session's turn spans in start order."""
        return sorted((s for s in self.spans if s["name"] == self.turn_name
                       and s["attributes"].get("gen_ai.conversation.id") == session),
                      key=lambda s: s["start_time"])


def flatten(attributes: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Phoenix returns dotted attribute names nested (``{"gen_ai": {"conversation": ...}}``)."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


@pytest.fixture(scope="module")
def phoenix_tap() -> Iterator[tuple[Phoenix, OtlpTap]]:
    """Phoenix for the module, with the OTLP relay in front of it."""
    with running_phoenix() as phoenix, OtlpTap(phoenix.url).running() as tap:
        yield phoenix, tap


_demo: dict[str, Demo] = {}


async def produce(bootstrap: str, topic: str,
                  records: list[tuple[dict[str, Any], Adapter]]) -> None:
    """Produce each record keyed by its session, with its adapter's ``traceparent``."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for record, adapter in records:
            await producer.send_and_wait(
                topic, json.dumps(record).encode(), key=record["session_id"].encode(),
                headers=[("traceparent", adapter.traceparent)])
    finally:
        await producer.stop()


def said(values: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each session's replies, deduplicated by key, in topic order."""
    out: dict[str, list[str]] = defaultdict(list)
    seen: set[tuple[str, str]] = set()
    for value in values:
        if (value["session_id"], value["key"]) not in seen:
            seen.add((value["session_id"], value["key"]))
            out[value["session_id"]].append(value["text"])
    return dict(out)


def parents_of(records: list[Any]) -> dict[str, list[str]]:
    """Each session's replies' ``traceparent`` headers, deduplicated by key, in topic order."""
    out: dict[str, list[str]] = defaultdict(list)
    seen: set[tuple[str, str]] = set()
    for record in records:
        value = json.loads(record.value)
        if (value["session_id"], value["key"]) not in seen:
            seen.add((value["session_id"], value["key"]))
            headers = {name: bytes(v).decode() for name, v in record.headers or ()}
            out[value["session_id"]].append(headers.get("traceparent", ""))
    return dict(out)


async def run_demo(phoenix: Phoenix, tap: OtlpTap, store: Store, setup: ServiceSetup,
                   monkeypatch: pytest.MonkeyPatch) -> Demo:
    """The demo conversations, traced into Phoenix through the tap; once per module."""
    if "demo" in _demo:
        return _demo["demo"]
    run = uuid.uuid4().hex[:6]
    sessions = [f"demo-{run}-{i}" for i in range(CONVERSATIONS)]
    adapters = {s: [Adapter.new() for _ in range(3)] for s in sessions}
    # Hostile input next to good: the last conversation's first message has a broken context.
    adapters[sessions[-1]][0] = Adapter.new(broken=True)
    for name, value in {
        "OTEL_EXPORTER_OTLP_ENDPOINT": tap.url,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "OTEL_SERVICE_NAME": "turnflow",
        "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={PROJECT}",
    }.items():
        monkeypatch.setenv(name, value)
    assert tracing.start() is None
    model = HeldModel()
    settings = setup.settings(merge_bursts=True)
    try:
        async with (
            model.serving(),
            running_scheduler(store, setup, group_id=f"{settings.group_id}-scheduler",
                              options=FiringOptions(max_idle=0.5)),
            running_consumer(settings, demo_agent(model)) as service,
        ):
            def msg(s: str, text: str) -> dict[str, Any]:
                return {"session_id": s, "message": f"{text} {s}", "id": f"{s}/{text}"}

            await produce(setup.bootstrap, setup.topics[INBOUND],
                          [(msg(s, "hold"), adapters[s][0]) for s in sessions])
            await wait_until(lambda: len(model.calls) == len(sessions), within=60)
            await produce(setup.bootstrap, setup.topics[INBOUND],
                          [(msg(s, word), adapters[s][i + 1])
                           for s in sessions for i, word in enumerate(("hi", "fri"))])
            queues = service.parts.workers.queues
            await wait_until(lambda: queues.queued >= 2 * len(sessions), within=60)
            model.release.set()
            async with setup.reader() as reader:
                await reader.until(
                    lambda v: all(len(said(v).get(s, [])) >= 3 for s in sessions), within=60)
                values = await reader.settle(1.0)
                reply_parents = parents_of(reader.records)
    finally:
        tracing.shutdown()  # flushes every queued span to the tap, and so to Phoenix
    # Phoenix answers an export before its rows are written: wait until it holds them all.
    deadline = time.monotonic() + 30
    while True:
        stored = await asyncio.to_thread(phoenix.spans, PROJECT)
        if len(stored) >= len(tap.spans) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.3)
    for span in stored:
        span["attributes"] = flatten(span["attributes"])
    demo = Demo(phoenix, setup.topics[INBOUND], sessions, adapters, said(values),
                len(model.calls), reply_parents, stored,
                {t.span_id: t for t in tap.spans})
    _demo["demo"] = demo
    return demo


@pytest.fixture
async def demo(phoenix_tap: tuple[Phoenix, OtlpTap], store: Store, kafka_bootstrap: str,
               database_url: str, kafka_is_embedded: bool,
               monkeypatch: pytest.MonkeyPatch) -> Demo:
    """The module's demo, run by the first test that asks; its topics are named
    ``inbound.turns.demo.<random>`` and so on, so its spans read well in Phoenix."""
    if "demo" in _demo:
        return _demo["demo"]
    phoenix, tap = phoenix_tap
    topics = await service_topics(TopicFactory(kafka_bootstrap, "demo"))
    setup = ServiceSetup(kafka_bootstrap, database_url, topics, kafka_is_embedded)
    return await run_demo(phoenix, tap, store, setup, monkeypatch)


async def test_phoenix_holds_every_span_exported_with_the_conversation_id(demo: Demo) -> None:
    """Every span the services exported is stored in Phoenix, each carries
    ``gen_ai.conversation.id`` of one of the demo's conversations, and the conversations were
    answered as the demo expects (the held message, the burst as one turn answering its last
    line, then the nudge)."""
    for s in demo.sessions:
        assert demo.replies[s] == [f"echo: hold {s}", f"echo: fri {s}", NUDGE], s
    assert {s["context"]["span_id"] for s in demo.spans} == set(demo.tapped)
    assert len(demo.spans) >= 3 * CONVERSATIONS
    for span in demo.spans:
        assert span["attributes"].get("gen_ai.conversation.id") in demo.sessions, span["name"]


async def test_each_turn_is_its_own_trace_continuing_the_adapters(demo: Demo) -> None:
    """Each conversation has three turn spans, each a CONSUMER span in a trace of its own: the
    first the child of its message's adapter span (a root when that message's ``traceparent``
    is broken), the burst the child of its last message's adapter span and linked to both of
    its messages', the wake's in a trace no adapter started; and no span of one conversation
    is in a trace of another."""
    traces: dict[str, set[str]] = defaultdict(set)
    for span in demo.spans:
        traces[span["context"]["trace_id"]].add(span["attributes"]["gen_ai.conversation.id"])
    assert all(len(ids) == 1 for ids in traces.values()), "a trace mixes conversations"
    adapter_traces = {a.trace_id for s in demo.sessions for a in demo.adapters[s]}
    for s in demo.sessions:
        hold, hi, fri = demo.adapters[s]
        turns = demo.turns(s)
        assert len(turns) == 3, s
        first, burst, wake = turns
        for turn in turns:
            assert demo.tapped[turn["context"]["span_id"]].kind == "CONSUMER"
            assert turn["attributes"]["messaging.system"] == "kafka"
            assert turn["attributes"]["messaging.kafka.message.key"] == s
        if hold.broken:  # a context that does not parse: the turn starts a trace of its own
            assert first["parent_id"] is None
            assert first["context"]["trace_id"] not in adapter_traces
        else:
            assert (first["context"]["trace_id"], first["parent_id"]) == (hold.trace_id,
                                                                           hold.span_id)
        assert (burst["context"]["trace_id"], burst["parent_id"]) == (fri.trace_id, fri.span_id)
        assert burst["attributes"]["messaging.batch.message_count"] == 2
        assert sorted(demo.tapped[burst["context"]["span_id"]].links) == sorted(
            [(hi.trace_id, hi.span_id), (fri.trace_id, fri.span_id)])
        assert demo.tapped[first["context"]["span_id"]].links == ()
        assert wake["context"]["trace_id"] not in adapter_traces
        assert len({t["context"]["trace_id"] for t in turns}) == 3, s


async def test_each_reply_carries_the_context_of_the_turn_that_sent_it(demo: Demo) -> None:
    """Each reply on the outbound topic carries in its ``traceparent`` the trace and span id
    of the turn span (as Phoenix holds it) that sent it: the first reply the first turn's, the
    burst's reply the burst turn's, the nudge the wake turn's."""
    for s in demo.sessions:
        expected = [f"00-{t['context']['trace_id']}-{t['context']['span_id']}-"
                    for t in demo.turns(s)]
        got = demo.reply_parents[s]
        assert len(got) == len(expected) == 3, s
        for parent, prefix in zip(got, expected, strict=True):
            assert parent.startswith(prefix), (s, parent, prefix)


async def test_every_parent_is_in_its_trace_or_is_the_adapters_span(demo: Demo) -> None:
    """Phoenix can draw every trace as a tree: each span's parent is a span Phoenix holds in
    the same trace, or (for a turn span) the adapter's span the record's ``traceparent``
    named."""
    spans = demo.by_id()
    adapter_spans = {(a.trace_id, a.span_id) for s in demo.sessions for a in demo.adapters[s]
                     if not a.broken}
    for span in demo.spans:
        parent, trace_id = span["parent_id"], span["context"]["trace_id"]
        if parent is None:
            continue
        if parent in spans:
            assert spans[parent]["context"]["trace_id"] == trace_id
            assert (spans[parent]["attributes"]["gen_ai.conversation.id"]
                    == span["attributes"]["gen_ai.conversation.id"])
        else:
            assert span["name"] == demo.turn_name, span["name"]
            assert (trace_id, parent) in adapter_spans


async def test_phoenix_shows_each_conversation_as_a_session_of_its_turns(demo: Demo) -> None:
    """Phoenix reads ``gen_ai.conversation.id`` as its session id: each conversation is one
    session in Phoenix holding exactly that conversation's three turn traces."""
    for s in demo.sessions:
        session = demo.phoenix.get(f"/v1/sessions/{s}")["data"]
        assert session["session_id"] == s
        assert {t["trace_id"] for t in session["traces"]} == {
            t["context"]["trace_id"] for t in demo.turns(s)}


def chromium_found() -> bool:
    return Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)


async def test_model_calls_are_llm_spans_under_their_turn(demo: Demo) -> None:
    """Each model call is a CLIENT span ``chat <model>`` (GenAI conventions:
    ``gen_ai.operation.name`` chat, the provider and requested model) whose parent is the turn
    span it ran in, in that turn's trace and conversation, and which Phoenix reads as an LLM
    span; one span per call the model answered; the turn spans and the model-call spans carry
    the agent (``gen_ai.agent.id`` and ``.name``; a configured agent has no version)."""
    spans = demo.by_id()
    chats = [s for s in demo.spans if s["attributes"].get("gen_ai.operation.name") == "chat"]
    assert len(chats) == demo.model_calls
    for chat in chats:
        attributes = chat["attributes"]
        assert chat["name"] == f"chat {MODEL}" and attributes["gen_ai.request.model"] == MODEL
        assert attributes["gen_ai.provider.name"]
        assert (attributes["gen_ai.usage.input_tokens"],
                attributes["gen_ai.usage.output_tokens"]) == (10, 5)  # as the model answered
        assert demo.tapped[chat["context"]["span_id"]].kind == "CLIENT"
        assert chat["span_kind"] == "LLM"
        turn = spans[chat["parent_id"]]
        assert turn["name"] == demo.turn_name
        assert turn["context"]["trace_id"] == chat["context"]["trace_id"]
        assert (turn["attributes"]["gen_ai.conversation.id"]
                == attributes["gen_ai.conversation.id"])
    for s in demo.sessions:
        first, burst, _wake = demo.turns(s)
        for turn in (first, burst):
            assert [c["parent_id"] for c in chats].count(turn["context"]["span_id"]) == 1, s
    for span in chats + [t for s in demo.sessions for t in demo.turns(s)]:
        attributes = span["attributes"]
        assert (attributes["gen_ai.agent.id"], attributes["gen_ai.agent.name"]) == ("Demo", "Demo")
        assert "gen_ai.agent.version" not in attributes  # a configured agent has no versions


async def test_the_wake_links_to_the_turn_that_set_its_timer(demo: Demo) -> None:
    """The scheduler's wake is a PRODUCER span ``send <inbound topic>`` that starts a trace of
    its own, linked to the span of the turn that set the silence timer (the burst's, the last
    turn before the quiet), with the wake turn's CONSUMER span as its child, all in the
    conversation."""
    spans = demo.by_id()
    for s in demo.sessions:
        _first, burst, wake = demo.turns(s)
        assert wake["parent_id"] in spans, "the wake turn's span has no parent from the wake"
        producer = spans[wake["parent_id"]]
        assert producer["name"] == f"send {demo.inbound}"
        assert producer["parent_id"] is None
        assert producer["context"]["trace_id"] == wake["context"]["trace_id"]
        assert producer["attributes"]["gen_ai.conversation.id"] == s
        tapped = demo.tapped[producer["context"]["span_id"]]
        assert tapped.kind == "PRODUCER"
        assert tapped.links == ((burst["context"]["trace_id"], burst["context"]["span_id"]),)


CHROMIUM = os.environ.get("TURNFLOW_CHROMIUM", "/usr/bin/chromium")
BROWSER_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"]


async def test_phoenix_ui_draws_a_conversation_and_its_turns_traces(demo: Demo) -> None:
    """Phoenix's own UI, in headless Chromium, opens the trace of one conversation's burst
    turn and shows its turn span with the conversation id, then the conversation as a session
    of three traces, each opened into its tree. The pages are saved in ``test-artifacts/traces/``
    (``phoenix-trace.png``, ``phoenix-conversation.png``; docs/img has one of each)."""
    if not chromium_found():
        servers_unavailable(f"no Chromium at {CHROMIUM} (make chromium installs Debian's)")
    try:
        from playwright.async_api import async_playwright, expect
    except ImportError:
        servers_unavailable("playwright is not installed (pip install -e '.[test]')")
    session = demo.sessions[0]
    burst = demo.turns(session)[1]
    [project] = [p for p in demo.phoenix.get("/v1/projects")["data"] if p["name"] == PROJECT]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1440, "height": 900})
            page.set_default_timeout(60_000)  # two busy cores: Phoenix's pages can be slow
            try:
                await page.goto(f"{demo.phoenix.url}/projects/{project['id']}/traces/"
                                f"{burst['context']['trace_id']}")
                await page.get_by_text(demo.turn_name).first.wait_for()
                await page.get_by_text(session).first.wait_for()
                await page.screenshot(path=str(ARTIFACTS / "phoenix-trace.png"))
                await page.get_by_text("View Session").first.click()
                drawer = page.get_by_test_id("application-drawer-plane")
                await drawer.get_by_text("Turn 03").first.wait_for()
                tab = drawer.get_by_role("tab", name=re.compile("Traces")).last
                await tab.click()
                await expect(tab).to_have_attribute("aria-selected", "true", timeout=60_000)
                for number in ("01", "02", "03"):  # the session's traces, each opened
                    await drawer.get_by_text(number, exact=True).first.click()
                await drawer.get_by_text(demo.turn_name).nth(3).wait_for()
                await page.wait_for_timeout(1000)
                await page.screenshot(path=str(ARTIFACTS / "phoenix-conversation.png"))
            except Exception:
                await page.screenshot(path=str(ARTIFACTS / "phoenix-failed.png"))
                raise
        finally:
            await browser.close()
