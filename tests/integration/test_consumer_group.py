"""Two consumers in one group, one stopped mid-run: nothing lost, nothing applied twice."""

from __future__ import annotations

import random
import uuid

import pytest

from tests.integration.harness import (
    SetupFactory,
    counting_agent,
    load_when,
    message,
    running_consumer,
    verbatim_texts,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SESSIONS = 10
MESSAGES_PER_SESSION = 6


@pytest.mark.parametrize("drain_timeout_ms", [5000, 0], ids=["drained", "abandoned"])
async def test_consumer_stopped_mid_run_loses_nothing_and_applies_nothing_twice(
    service_setup: SetupFactory, drain_timeout_ms: int,
) -> None:
    """Consumer A stops while turns are in flight (drained, or abandoned at once); B takes
    over its partitions. Every session ends with all its replies in order and a stored
    version equal to its number of inputs."""
    setup = await service_setup(partitions=4)
    rnd = random.Random(drain_timeout_ms)
    sessions = [f"group{i}-{uuid.uuid4().hex[:6]}" for i in range(SESSIONS)]
    inputs = [
        message(sid, f"m{n}", delay_ms=rnd.randint(50, 300))
        for n in range(MESSAGES_PER_SESSION)
        for sid in sessions
    ]
    total = len(inputs)
    group = f"group-test-{uuid.uuid4().hex[:8]}"

    def settings_for(drain_ms: int) -> object:
        return setup.settings(
            group_id=group, max_in_flight=4, drain_timeout_ms=drain_ms,
        )

    async with setup.reader() as replies:
        async with running_consumer(settings_for(5000), counting_agent()) as b:
            async with running_consumer(
                settings_for(drain_timeout_ms), counting_agent(), stop_within=45
            ) as a:
                await wait_until(lambda: bool(a.assignment) and bool(b.assignment), within=45)
                await setup.produce(inputs)
                await replies.until(
                    lambda v: sum(len(t) for t in verbatim_texts(v).values()) >= total // 4
                )
            # A is stopped here, mid-run; B must take over and finish.
            values = await replies.until(
                lambda v: sum(len(t) for t in verbatim_texts(v).values()) >= total,
                within=60,
            )
            stored = [
                await load_when(setup.database_url, sid,
                                lambda s: s.version >= MESSAGES_PER_SESSION)
                for sid in sessions
            ]
        values = await replies.settle(0.5)

    texts = verbatim_texts(values)
    for sid in sessions:
        assert texts[sid] == [f"{n + 1}:m{n}" for n in range(MESSAGES_PER_SESSION)], sid
    assert [s.version for s in stored] == [MESSAGES_PER_SESSION] * SESSIONS
    assert [s.state["data"]["n"] for s in stored] == [MESSAGES_PER_SESSION] * SESSIONS
