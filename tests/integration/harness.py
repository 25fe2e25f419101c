"""Driving the consumer service as its users do: produce inputs, read outbound topics.

``running_consumer`` runs a ``ConsumerService`` in this event loop on per-test topics and group,
and always stops it (a stop that does not finish in time fails the test). ``produce`` writes
``inbound.turns`` records keyed by session id; ``OutboundReader`` reads a topic from the start
without a group. ``CountingAgent`` is a small deterministic agent whose replies number the
inputs it has applied to a session ("3:hello"), so a lost, reordered or doubly applied input
shows up in the reply text itself.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from consumer.service import ConsumerService
from consumer.settings import Settings
from tests.fixtures.broker import TopicFactory

INBOUND = "inbound.turns"
MESSAGES = "outbound.messages"
SCHEDULE = "outbound.schedule"
DLQ = "inbound.turns.dlq"


class CountingAgent:
    """Replies ``"<n>:<label>"`` where n counts the inputs applied to the session so far.

    ``latency(session_id, label)`` gives seconds to sleep inside the turn (a slow model).
    Every applied turn also schedules one timer. A message id seen before is answered with
    nothing, as the engine's input ring does. ``calls`` lists (session, label) per call.
    """

    def __init__(self, latency: Callable[[str, str], float] | None = None) -> None:
        self._latency = latency or (lambda _s, _l: 0.0)
        self.calls: list[tuple[str, str]] = []

    async def turn(self, request: dict[str, Any]) -> dict[str, Any]:
        session_id = request["session_id"]
        label = str(
            request.get("message") or request.get("wake") or request.get("event") or "start"
        )
        self.calls.append((session_id, label))
        delay = self._latency(session_id, label)
        if delay:
            await asyncio.sleep(delay)
        state = copy.deepcopy(request.get("session")) or {"id": session_id, "data": {}}
        ids = state["data"].setdefault("ids", [])
        if request.get("id") is not None:
            # Like the engine's ring of input ids: a message id seen before is a duplicate.
            if request["id"] in ids:
                return {"session": state, "changed": False, "messages": [], "schedule": [],
                        "outcomes": [{"code": "duplicate-input"}], "llm_calls": 0}
            ids.append(request["id"])
        seen = state["data"].setdefault("seen", [])
        seen.append(label)
        n = len(seen)
        return {
            "session": state,
            "changed": True,
            "messages": [
                {"kind": "verbatim", "text": f"{n}:{label}", "key": f"{session_id}:m{n}",
                 "after_ms": 0, "run_id": "r1", "step_id": "s1"}
            ],
            "schedule": [
                {"key": f"{session_id}:t{n}",
                 "at": datetime(2030, 1, 1, tzinfo=UTC) + timedelta(minutes=n),
                 "replaces": f"{session_id}:t{n - 1}" if n > 1 else None}
            ],
            "outcomes": [{"code": "test-applied"}],
            "llm_calls": 0,
        }


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
    }
    values.update(overrides)
    return Settings(**values)


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


def texts_by_session(values: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Reply texts per session, in topic order."""
    out: dict[str, list[str]] = {}
    for value in values:
        out.setdefault(value["session_id"], []).append(value["text"])
    return out


async def wait_until(condition: Callable[[], bool], *, within: float = 30.0) -> None:
    """Poll ``condition`` until it holds; TimeoutError after ``within`` seconds."""
    async with asyncio.timeout(within):
        while True:
            if condition():
                return
            await asyncio.sleep(0.05)
