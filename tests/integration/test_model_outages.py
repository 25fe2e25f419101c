"""When the model fails, the customer is never dropped: the real consumer in front of a stand-in
OpenAI-compatible server (its own process) that is killed, restarted, slowed, and that answers
some messages with prose instead of JSON, with many conversations in flight.

- an outage longer than the old retry budget (15.7 s): every message is answered once, in
  order, after the server is back, nothing dead-lettered, and inputs that need no model call go
  on meanwhile;
- an outage past ``MODEL_OUTAGE_MAX_MS``: each message gets the fallback message once, in order,
  nothing dead-lettered, and the conversation goes on normally once the model is back;
- a temperature-0 server whose reply is never usable: understand reads it as an empty judgement
  (no retry), the idle reply is retried, then the fallback answers; nothing dead-lettered;
- a model slower than the silence: the silence wake comes a whole silence after the reply.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import pytest

from consumer import metrics
from engine import Agent
from engine.providers.openai import OpenAIProvider
from replay.report import report_text
from replay.session import replay_many
from replay.source import Selection, choose_sessions, read_conversations
from store import Store
from tests.fixtures.llama_server import free_port
from tests.fixtures.stand_in_model import StandInModel
from tests.integration.harness import (
    DLQ,
    INBOUND,
    SCHEDULE,
    ServiceSetup,
    SetupFactory,
    running_consumer,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

SILENCE_MS = 1500
FALLBACK = "Sorry, the assistant is unavailable right now."
FLOWS: list[dict[str, Any]] = [
    {"id": "pizza", "on": [{"message": ["a pizza"]}], "steps": [{"id": "p", "say": "pizza"}]},
    {"id": "book", "on": [{"message": ["book a table"]}], "steps": [{"id": "b", "say": "booked"}]},
    {"id": "paid", "on": [{"event": "paid"}], "steps": [{"id": "t", "say": "payment received"}]},
    {"id": "nudge", "on": [{"silence": SILENCE_MS}], "steps": [{"id": "n", "say": "Still there?"}]},
]


def model_agent(base_url: str) -> Agent:
    """Every message costs two calls: understand scores the two phrase flows (the stand-in
    recognises nothing), then the idle speaker answers ``echo: <message>``."""
    provider = OpenAIProvider(api_key="test", model="stand-in", base_url=base_url, timeout=5.0,
                              env={})
    return Agent(name="Eco", provider=provider, flows=FLOWS, events={"paid": {}})


@asynccontextmanager
async def stand_in(**options: Any) -> AsyncIterator[StandInModel]:
    server = StandInModel(free_port(), **options)
    await asyncio.to_thread(server.start)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.kill)


def message(session_id: str, text: str) -> dict[str, Any]:
    return {"session_id": session_id, "message": text, "id": f"{session_id}:{text}"}


def replies(values: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The texts each conversation got, in topic order (silence nudges left out)."""
    out: dict[str, list[str]] = {}
    for value in values:
        if value["text"] != "Still there?":
            out.setdefault(value["session_id"], []).append(value["text"])
    return out


async def dead_letters(setup: ServiceSetup) -> int:
    async with setup.reader(DLQ) as dlq:
        await dlq.settle(1.0)
        return len(dlq.records)


async def replays_identical(setup: ServiceSetup, sessions: list[str]) -> None:
    """The turn log of ``sessions`` replays identical on the same agent: fallback turns, the
    understand calls read as empty judgements and the recorded reply times included."""
    store = await Store.connect(setup.database_url, pool_size=2)
    try:
        chosen = await choose_sessions(store, Selection(sessions=tuple(sessions)))
        conversations = [c async for c in read_conversations(store, chosen)]
    finally:
        await store.close()
    summary = await replay_many(model_agent("http://127.0.0.1:9/v1"), conversations)
    assert summary.counts()["identical"] == len(sessions), report_text(summary)
    assert summary.unrecorded == 0


def fallbacks(reason: str) -> float:
    return float(metrics.MODEL_FALLBACKS.labels(reason=reason)._value.get())


async def test_an_outage_longer_than_the_old_retry_budget_loses_no_message(
    service_setup: SetupFactory,
) -> None:
    """12 conversations answered once; the server is killed; each sends two more messages
    while it is down for 17 s (more than the 15.7 s the old budget lasted); events for 4 other
    conversations, which need no model call, are answered during the outage; the server comes
    back and every held message is answered exactly once, in order; no dead letter, no
    fallback."""
    setup = await service_setup(partitions=3)
    tag = uuid.uuid4().hex[:6]
    talkers = [f"talk-{tag}-{i}" for i in range(12)]
    payers = [f"pay-{tag}-{i}" for i in range(4)]
    settings = setup.settings(retry_backoff_ms=200, retry_backoff_max_ms=2000,
                              model_outage_max_ms=120_000, model_fallback_message=FALLBACK)
    before = fallbacks("model-unavailable")
    async with stand_in() as server, setup.reader() as out:
        async with running_consumer(settings, model_agent(server.base_url)) as service:
            await setup.produce([message(sid, "hello") for sid in talkers])
            await out.until(lambda v: len(replies(v)) == len(talkers), within=40)
            await asyncio.to_thread(server.kill)
            down_at = time.monotonic()
            await setup.produce([message(sid, text) for text in ("my name is Sam", "any news?")
                                 for sid in talkers])
            await setup.produce([{"session_id": sid, "event": "paid", "key": f"{sid}-p"}
                                 for sid in payers])
            await out.until(lambda v: set(payers) <= set(replies(v)), within=15)
            while time.monotonic() - down_at < 17:
                await asyncio.sleep(0.5)
                assert {len(replies(out.values).get(s, [])) for s in talkers} == {1}
            assert metrics.MODEL_WAITING._value.get() == len(talkers)
            await asyncio.to_thread(server.start)
            await out.until(lambda v: all(len(replies(v).get(s, [])) >= 3 for s in talkers),
                            within=40)
            await out.settle(1.0)
            assert service.ready()
        assert metrics.MODEL_WAITING._value.get() == 0
    got = replies(out.values)
    for sid in talkers:
        assert got[sid] == ["echo: hello", "echo: my name is Sam", "echo: any news?"], sid
    for sid in payers:
        assert got[sid] == ["payment received"]
    assert await dead_letters(setup) == 0
    assert fallbacks("model-unavailable") == before


async def test_past_the_outage_bound_each_message_gets_the_fallback_once(
    service_setup: SetupFactory,
) -> None:
    """The server is down past ``MODEL_OUTAGE_MAX_MS`` (3 s): each of 2 messages of 8
    conversations gets the fallback message exactly once, in order, nothing dead-lettered;
    once the server is back the next message is answered by the model."""
    setup = await service_setup(partitions=2)
    tag = uuid.uuid4().hex[:6]
    sessions = [f"bound-{tag}-{i}" for i in range(8)]
    settings = setup.settings(retry_backoff_ms=200, retry_backoff_max_ms=1000,
                              model_outage_max_ms=3000, model_fallback_message=FALLBACK)
    before = fallbacks("model-unavailable")
    async with stand_in() as server, setup.reader() as out:
        async with running_consumer(settings, model_agent(server.base_url)):
            await asyncio.to_thread(server.kill)
            await setup.produce([message(sid, text) for text in ("first", "second")
                                 for sid in sessions])
            await out.until(lambda v: all(len(replies(v).get(s, [])) >= 2 for s in sessions),
                            within=40)
            await asyncio.to_thread(server.start)
            await setup.produce([message(sid, "third") for sid in sessions])
            await out.until(lambda v: all(len(replies(v).get(s, [])) >= 3 for s in sessions),
                            within=40)
            await out.settle(1.0)
    got = replies(out.values)
    for sid in sessions:
        assert got[sid] == [FALLBACK, FALLBACK, "echo: third"], sid
    assert fallbacks("model-unavailable") - before == 2 * len(sessions)
    assert await dead_letters(setup) == 0
    await replays_identical(setup, sessions)


async def test_a_model_that_never_answers_usably_gets_no_message_dead_lettered(
    service_setup: SetupFactory,
) -> None:
    """A temperature-0 server answering prose to the same prompt every time: an understand
    reply in prose is read as an empty judgement (the call counts, no retry) and the idle
    speaker answers at once; an idle reply in prose is retried ``MAX_RETRIES`` times, then the
    fallback answers; nothing dead-lettered."""
    setup = await service_setup(partitions=2)
    tag = uuid.uuid4().hex[:6]
    good = [f"good-{tag}-{i}" for i in range(5)]
    garbled = [f"garbled-{tag}-{i}" for i in range(5)]
    settings = setup.settings(max_retries=2, retry_backoff_ms=100, retry_backoff_max_ms=300,
                              model_fallback_message=FALLBACK)
    before = fallbacks("unusable-reply")
    retries = metrics.INPUT_RETRIES._value.get()
    async with stand_in(garble="nonsense", garble_understand="gibberish") as server, \
            setup.reader() as out:
        async with running_consumer(settings, model_agent(server.base_url)):
            await setup.produce([message(sid, "gibberish hello") for sid in good]
                                + [message(sid, "nonsense please") for sid in garbled]
                                + [message(sid, "and now?") for sid in garbled])
            await out.until(lambda v: set(good) <= set(replies(v)) and all(
                len(replies(v).get(s, [])) >= 2 for s in garbled), within=40)
            await out.settle(1.0)
    got = replies(out.values)
    for sid in good:
        assert got[sid] == ["echo: gibberish hello"]
    for sid in garbled:
        assert got[sid] == [FALLBACK, "echo: and now?"], sid
    assert fallbacks("unusable-reply") - before == len(garbled)
    assert metrics.INPUT_RETRIES._value.get() - retries == 2 * len(garbled)
    assert await dead_letters(setup) == 0
    await replays_identical(setup, good + garbled)


async def test_a_slow_model_does_not_bring_the_silence_nudge_at_once(
    service_setup: SetupFactory,
) -> None:
    """Each call takes 1.2 s (a turn 2.4 s, longer than the 1.5 s silence): every conversation's
    silence wake is due a whole silence after its reply was final, so at least 2.4 + 1.5 s
    after the message came in, never when the reply goes out (counted from the turn's start
    it was due 0.9 s before the reply existed)."""
    setup = await service_setup(partitions=2)
    tag = uuid.uuid4().hex[:6]
    sessions = [f"slow-{tag}-{i}" for i in range(6)]
    async with stand_in(delay=1.2) as server, setup.reader() as out, \
            setup.reader(SCHEDULE) as wakes:
        async with running_consumer(setup.settings(), model_agent(server.base_url)):
            await setup.produce([message(sid, "hello") for sid in sessions])
            await out.until(lambda v: set(sessions) <= set(replies(v)), within=40)
            await wakes.until(lambda v: len(v) >= len(sessions), within=20)
        async with setup.reader(INBOUND) as inbound:
            await inbound.until(lambda v: len(v) >= len(sessions), within=20)
    came_at = {r.key.decode(): r.timestamp for r in inbound.records}
    assert sorted(r.key.decode() for r in wakes.records) == sorted(sessions)
    for record in wakes.records:
        value = record.value
        assert value is not None
        sid = record.key.decode()
        due_after = _ms(json.loads(value)["at"]) - came_at[sid]
        assert due_after >= 2 * 1200 + SILENCE_MS, (sid, due_after)
    await replays_identical(setup, sessions)


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)
