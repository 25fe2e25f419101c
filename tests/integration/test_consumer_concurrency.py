"""Sessions run concurrently, each strictly in order, even inside one partition."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from consumer.settings import Settings
from tests.integration.harness import (
    RecordingAgent,
    ServiceSetup,
    SetupFactory,
    counting_agent,
    message,
    running_consumer,
    verbatim_texts,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


async def answered(
    setup: ServiceSetup,
    settings: Settings,
    agent: Any,
    inputs: list[dict[str, Any]],
    *,
    within: float,
) -> dict[str, list[str]]:
    """Run a consumer with ``agent``, produce ``inputs`` and read until each has its reply:
    the counting agent's texts per session."""
    async with running_consumer(settings, agent):
        await setup.produce(inputs)
        async with setup.reader() as replies:
            values = await replies.until(
                lambda v: sum(len(t) for t in verbatim_texts(v).values()) >= len(inputs),
                within=within,
            )
    return verbatim_texts(values)


async def test_slow_session_does_not_hold_up_another_in_the_same_partition(
    service_setup: SetupFactory,
) -> None:
    """With one partition, a session whose model takes seconds is answered after a fast
    session that wrote later has had all its replies, and the offset commit waits for it."""
    setup = await service_setup(partitions=1)
    slow, fast = f"slow-{uuid.uuid4().hex[:6]}", f"fast-{uuid.uuid4().hex[:6]}"
    settings = setup.settings()
    async with running_consumer(settings, counting_agent()) as service:
        await setup.produce([
            message(slow, "devagar", delay_ms=4000),
            message(fast, "a"), message(fast, "b"), message(fast, "c"),
        ])
        async with setup.reader() as replies:
            early = await replies.until(lambda v: len(verbatim_texts(v).get(fast, [])) >= 3,
                                        within=15)
            assert slow not in verbatim_texts(early)
            # Everything after the slow record is done, yet the slow one holds the commit.
            assert sum(service.committed_offsets().values()) == 0
            values = await replies.until(lambda v: slow in verbatim_texts(v), within=15)
    texts = verbatim_texts(values)
    assert texts[fast] == ["1:a", "2:b", "3:c"]
    assert texts[slow] == ["1:devagar"]


async def test_per_session_order_under_random_model_latency(service_setup: SetupFactory) -> None:
    """Eight sessions of six messages each, interleaved over two partitions with random model
    latency: every session's replies come out complete and in its input order."""
    setup = await service_setup(partitions=2)
    rnd = random.Random(20261130)
    sessions = [f"order{i}-{uuid.uuid4().hex[:6]}" for i in range(8)]
    inputs = [
        message(sid, f"m{n}", delay_ms=rnd.randint(0, 250))
        for n in range(6)
        for sid in sessions
    ]
    settings = setup.settings(max_in_flight=6)
    texts = await answered(setup, settings, counting_agent(), inputs, within=45)
    for sid in sessions:
        assert texts[sid] == [f"{n + 1}:m{n}" for n in range(6)], sid


async def test_fetching_pauses_and_resumes_under_back_pressure(service_setup: SetupFactory) -> None:
    """With room for only four buffered records, forty inputs are still all answered in
    order: fetching pauses while the buffer is full and resumes as it drains."""
    setup = await service_setup(partitions=2)
    sessions = [f"bp{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    inputs = [message(sid, f"m{n}", delay_ms=20) for n in range(10) for sid in sessions]
    settings = setup.settings(max_buffered_records=4, max_in_flight=2)
    texts = await answered(setup, settings, counting_agent(), inputs, within=60)
    for sid in sessions:
        assert texts[sid] == [f"{n + 1}:m{n}" for n in range(10)], sid


class ConcurrencyAgent(RecordingAgent):
    """A ``RecordingAgent`` that also records how many of its turns run at once, at most."""

    def __init__(self, agent: Any) -> None:
        super().__init__(agent)
        self.running = 0
        self.most = 0

    async def turn(self, request: dict[str, Any]) -> Any:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            return await super().turn(request)
        finally:
            self.running -= 1


async def test_turns_stay_within_the_slots_while_many_conversations_load_ahead(
    service_setup: SetupFactory,
) -> None:
    """Thirty conversations of four messages on three turn slots: inputs load while every slot
    is taken, yet no more than three turns run at once, and every conversation gets each reply
    once, in its order, with nothing of one in another."""
    setup = await service_setup(partitions=2)
    sessions = [f"slots{i}-{uuid.uuid4().hex[:6]}" for i in range(30)]
    inputs = [message(sid, f"{sid}.m{n}", delay_ms=30) for n in range(4) for sid in sessions]
    agent = ConcurrencyAgent(counting_agent())
    texts = await answered(setup, setup.settings(max_in_flight=3), agent, inputs, within=60)
    assert set(texts) == set(sessions)
    for sid in sessions:
        assert texts[sid] == [f"{n + 1}:{sid}.m{n}" for n in range(4)], sid
    assert len(agent.calls) == len(inputs)  # no input ran twice
    assert 1 < agent.most <= 3  # turns did overlap, never beyond the slots
