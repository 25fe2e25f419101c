"""Outcomes for every agent: a fallback of an agent without lifecycle settings is listed,
badged and explained with its retries; every turn shows when its record was written."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from typing import Any

import pytest

from consumer.inspect import terminal, view
from consumer.inspect.reading import ListFilter, Reader
from engine import ModelRequest, ModelResponse, ProviderError
from engine.providers.rules import RuleProvider
from examples.demo_agent import build_agent
from tests.fixtures.broker import TopicFactory
from tests.integration.harness import ServiceSetup, running_consumer, service_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

UNREACHABLE = "plugh"
"""A word that makes the provider unreachable (a retryable error) for any message holding it."""


class OutageProvider:
    """The offline rule provider, unreachable for a message holding ``UNREACHABLE``."""

    def __init__(self) -> None:
        self._inner = RuleProvider()

    async def generate(self, request: ModelRequest) -> ModelResponse:
        if UNREACHABLE in str(request.meta.get("message") or ""):
            raise ProviderError("the model server is down", kind="retryable")
        return await self._inner.generate(request)


async def _saved(url: str, expected: dict[str, int], within: float = 90.0) -> None:
    import asyncpg

    from store.urls import plain_url

    connection = await asyncpg.connect(plain_url(url))
    try:
        async with asyncio.timeout(within):
            while True:
                rows = await connection.fetch(
                    "SELECT id, version FROM sessions WHERE id = ANY($1::text[])", list(expected)
                )
                versions = {r["id"]: r["version"] for r in rows}
                if all(versions.get(s, 0) >= n for s, n in expected.items()):
                    return
                await asyncio.sleep(0.2)
    finally:
        await connection.close()


async def test_a_fallback_of_an_agent_without_lifecycle_settings_is_listed_and_explained(
    kafka_bootstrap: str, database_url: str, kafka_is_embedded: bool
) -> None:
    """With the model down for one conversation, the demo agent (no lifecycle settings)
    answers it with the fallback: ``--outcome fallback`` lists that conversation alone, its
    turn is badged, shows the failed attempts and the last error instead of "code alone", and
    every turn of every conversation shows when its record was written."""
    prefix = f"o{uuid.uuid4().hex[:6]}-"
    down = [f"{prefix}down-{n}" for n in range(2)]
    fine = [f"{prefix}fine-{n}" for n in range(3)]
    topics = await service_topics(TopicFactory(kafka_bootstrap, "outcomes"))
    setup = ServiceSetup(kafka_bootstrap, database_url, topics, kafka_is_embedded)
    agent = build_agent(provider=OutageProvider())
    assert agent.config.lifecycle is None
    records: list[dict[str, Any] | bytes] = []
    for sid in down + fine:
        records.append({"session_id": sid, "message": "hi", "id": "m0"})
    for sid in down:
        records.append({"session_id": sid, "message": f"{UNREACHABLE} are you there?",
                        "id": "m1"})
    for sid in fine:
        records.append({"session_id": sid, "message": "what are your opening hours?",
                        "id": "m1"})
    settings = setup.settings(model_outage_max_ms=1500, retry_backoff_ms=100,
                              retry_backoff_max_ms=300, merge_bursts=False)
    async with running_consumer(settings, agent):
        await setup.produce(records)
        await _saved(database_url, dict.fromkeys(down + fine, 2))

    reader = Reader(database_url)
    try:
        listed, _ = await reader.conversations(ListFilter(outcome="fallback"), limit=500)
        pages = {sid: await reader.conversation(sid) for sid in down + fine}
    finally:
        await reader.close()
    assert sorted(r.session_id for r in listed if r.session_id.startswith(prefix)) == down
    for sid in down:
        rows = pages[sid]
        assert rows is not None
        first, fallback = view.conversation_view(rows).turns
        assert first.incidents == [] and first.retries is None
        assert fallback.incidents == ["fallback"]
        assert fallback.fallback_reason == "model-unavailable"
        assert fallback.retries is not None and fallback.retries["attempts"] >= 2
        assert "ProviderError" in fallback.retries["last_error"]
        assert fallback.retries["waited_ms"] >= 1000
        text = terminal.conversation_text(view.conversation_view(rows))
        assert "failed attempt(s)" in text and "fallback sent" in text
    for sid in fine:
        rows = pages[sid]
        assert rows is not None
        turns = view.conversation_view(rows).turns
        assert all(t.incidents == [] and t.retries is None for t in turns)
        assert all(t.understood and all(c["latency_ms"] is not None for c in t.understood)
                   for t in turns)
    for rows in pages.values():
        assert rows is not None
        for turn in view.conversation_view(rows).turns:
            # Compared as instants: the record's time is whole seconds ("...:50Z"), the
            # turn's has microseconds, and as strings "Z" sorts after ".".
            assert turn.record_at is not None
            assert datetime.fromisoformat(turn.record_at) <= turn.at
