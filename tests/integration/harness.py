"""Driving the consumer service as its users do: produce inputs, read outbound topics.

``running_consumer`` runs a ``ConsumerService`` in this event loop on per-test topics and group,
and always stops it (a stop that does not finish in time fails the test). ``produce`` writes
``inbound.turns`` records keyed by session id; ``OutboundReader`` reads a topic from the start
without a group. ``ServiceSetup`` (what the ``service_setup`` fixture gives) binds the three to
one test's servers and topics. ``counting_agent()`` is a code-first engine agent whose replies
number the inputs applied to a session ("3:hello"), so a lost, reordered or doubly applied input
shows up in the reply text itself.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from consumer.settings import Settings
from consumer.turns.service import ConsumerService
from engine import Agent, ModelRequest, ModelResponse, ok
from engine.providers.rules import RuleProvider
from store import Store
from tests.fixtures.broker import TopicFactory

INBOUND = "inbound.turns"
MESSAGES = "outbound.messages"
SCHEDULE = "outbound.schedule"
DLQ = "inbound.turns.dlq"


class SlowProvider:
    """The offline rule provider behind a delay read from the session's ``delay_ms`` field:
    a slow model for some sessions, a fast one for others."""

    def __init__(self) -> None:
        self._inner = RuleProvider()

    async def generate(self, request: ModelRequest) -> ModelResponse:
        known = request.meta.get("known") or {}
        delay_ms = known.get("delay_ms") or 0
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)
        return await self._inner.generate(request)


def counting_agent() -> Agent:
    """A real engine agent whose replies number the inputs applied to the session.

    Every message runs: ``count`` (data ``n`` += 1, ``last`` and ``delay_ms`` from the input's
    context), a verbatim ``"<n>:<label>"``, one model call (slow when ``delay_ms`` is set), then
    a one-hour wait, which puts a timer on ``outbound.schedule``; the next message answers the
    wait and loops. A lost, reordered or doubly applied input shows in the verbatim texts.
    """

    async def count(ctx: Any) -> Any:
        return ok(data={
            "n": int(ctx.data.get("n") or 0) + 1,
            "last": str(ctx.context.get("label", "")),
            "delay_ms": int(ctx.context.get("delay_ms", 0)),
        })

    return Agent(
        name="Contadora",
        provider=SlowProvider(),
        fields={
            "n": {"type": "integer"},
            "last": {"type": "string"},
            "delay_ms": {"type": "integer"},
        },
        actions={"count": count},
        flows=[{
            "id": "count",
            "on": [{"message": []}],
            "steps": [
                {"id": "c", "do": "count"},
                {"id": "say", "say": "{{n}}:{{last}}"},
                {"id": "think", "prompt": "Comente a mensagem."},
                {"id": "w", "wait": {"ms": 3_600_000}, "then": "end", "else": "c"},
            ],
        }],
    )


class RecordingAgent:
    """Wraps an agent and records the (session id, input id) of every turn it is asked for."""

    def __init__(self, agent: Any) -> None:
        self._agent = agent
        self.calls: list[tuple[str, str | None]] = []

    @property
    def config(self) -> Any:
        return self._agent.config

    async def turn(self, request: dict[str, Any]) -> Any:
        self.calls.append((request["session_id"], request.get("id")))
        return await self._agent.turn(request)


def message(session_id: str, label: str, *, delay_ms: int = 0) -> dict[str, Any]:
    """An inbound message record whose label the counting agent echoes."""
    return {
        "session_id": session_id,
        "message": label,
        "id": f"wamid.{uuid.uuid4().hex[:12]}",
        "context": {"label": label, "delay_ms": delay_ms},
    }


def verbatim_texts(values: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The counting agent's ``"<n>:<label>"`` replies per session, deduplicated by session and
    ``key`` (as delivery workers do; engine keys are unique within a session), in topic order."""
    out: dict[str, list[str]] = {}
    seen: set[tuple[str, str]] = set()
    for value in values:
        identity = (value["session_id"], value["key"])
        if value["kind"] != "verbatim" or identity in seen:
            continue
        seen.add(identity)
        out.setdefault(value["session_id"], []).append(value["text"])
    return out


async def service_topics(kafka_topics: TopicFactory, partitions: int = 3) -> dict[str, str]:
    """Fresh inbound, outbound and DLQ topics for one test."""
    return await kafka_topics(INBOUND, MESSAGES, SCHEDULE, DLQ, partitions=partitions)


def make_settings(
    bootstrap: str,
    database_url: str,
    topics: dict[str, str],
    *,
    embedded: bool,
    **overrides: Any,
) -> Settings:
    """Settings for a consumer under test; ``embedded`` turns off the idempotent producer,
    which the embedded broker cannot serve (it has no producer ids)."""
    values: dict[str, Any] = {
        "kafka_idempotent_producer": not embedded,
        "kafka_bootstrap_servers": bootstrap,
        "database_url": database_url,
        "inbound_topic": topics[INBOUND],
        "messages_topic": topics[MESSAGES],
        "schedule_topic": topics[SCHEDULE],
        "dlq_topic": topics[DLQ],
        "group_id": f"consumer-test-{uuid.uuid4().hex[:8]}",
        "metrics_port": 0,
        "max_in_flight": 16,
        "retry_backoff_ms": 50,
        "retry_backoff_max_ms": 200,
        "drain_timeout_ms": 5000,
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 500,
        "relay_interval_ms": 500,
        "relay_grace_ms": 3000,
        # One turn per record unless a test asks for bursts: most tests count replies per input.
        "merge_bursts": False,
    }
    values.update(overrides)
    return Settings(**values)


@dataclass
class ServiceSetup:
    """One test's servers and fresh topics: the arguments its settings, inputs and readers
    share, so a test names only what differs."""

    bootstrap: str
    database_url: str
    topics: dict[str, str]
    embedded: bool

    def settings(self, **overrides: Any) -> Settings:
        """``make_settings`` on these servers and topics, with a fresh group unless told."""
        return make_settings(
            self.bootstrap, self.database_url, self.topics, embedded=self.embedded, **overrides
        )

    async def produce(self, records: list[dict[str, Any] | bytes], *,
                      key: bytes | None = None) -> None:
        """``produce`` to this test's inbound topic."""
        await produce(self.bootstrap, self.topics[INBOUND], records, key=key)

    def reader(self, base: str = MESSAGES) -> OutboundReader:
        """An ``OutboundReader`` of this test's topic named ``base`` (outbound.messages)."""
        return OutboundReader(self.bootstrap, self.topics[base])


SetupFactory = Callable[..., Awaitable[ServiceSetup]]
"""The ``service_setup`` fixture: ``await service_setup(partitions=n)`` gives a
``ServiceSetup`` on fresh topics."""


@asynccontextmanager
async def running_consumer(
    settings: Settings, agent: Any, *, ready_within: float = 30.0, stop_within: float = 30.0
) -> AsyncIterator[ConsumerService]:
    """A consumer running until the block ends; waits until it has partitions."""
    service = ConsumerService(settings, agent)
    task = asyncio.create_task(service.run(), name="consumer-under-test")
    try:
        async with asyncio.timeout(ready_within):
            while not service.assignment:
                if task.done():
                    task.result()
                await asyncio.sleep(0.05)
        yield service
    finally:
        service.stop()
        async with asyncio.timeout(stop_within):
            await task


async def produce(bootstrap: str, topic: str, records: list[dict[str, Any] | bytes],
                  *, key: bytes | None = None) -> None:
    """Produce records in order; dicts are JSON keyed by their session id, bytes use ``key``."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for record in records:
            if isinstance(record, bytes):
                await producer.send_and_wait(topic, record, key=key)
            else:
                await producer.send_and_wait(
                    topic, json.dumps(record).encode(), key=record["session_id"].encode()
                )
    finally:
        await producer.stop()


class OutboundReader:
    """Reads a topic from the beginning (no group) and keeps every record seen."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
            enable_auto_commit=False, group_id=None,
        )
        self.records: list[Any] = []

    async def __aenter__(self) -> OutboundReader:
        await self._consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    @property
    def values(self) -> list[dict[str, Any]]:
        return [json.loads(r.value) for r in self.records]

    async def until(self, done: Callable[[list[dict[str, Any]]], bool], *,
                    within: float = 30.0) -> list[dict[str, Any]]:
        """Read until ``done(values)`` holds; TimeoutError when it does not within ``within``."""
        async with asyncio.timeout(within):
            while not done(self.values):
                batch = await self._consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    self.records.extend(records)
        return self.values

    async def settle(self, seconds: float) -> list[dict[str, Any]]:
        """Keep reading for ``seconds`` (to catch late duplicates)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while loop.time() < end:
            batch = await self._consumer.getmany(timeout_ms=100)
            for records in batch.values():
                self.records.extend(records)
        return self.values




async def wait_until(condition: Callable[[], bool], *, within: float = 30.0) -> None:
    """Poll ``condition`` until it holds; TimeoutError after ``within`` seconds."""
    async with asyncio.timeout(within):
        while True:
            if condition():
                return
            await asyncio.sleep(0.05)


async def load_when(
    database_url: str, session_id: str, done: Callable[[Any], bool], *, within: float = 30.0
) -> Any:
    """The session as stored, once ``done(loaded)`` holds (polling the store)."""
    store = await Store.connect(database_url, pool_size=1, max_overflow=0)
    try:
        async with asyncio.timeout(within):
            while True:
                loaded = await store.load(session_id)
                if done(loaded):
                    return loaded
                await asyncio.sleep(0.1)
    finally:
        await store.close()
