"""kill -9 of one consumer of a group of two while inputs keep arriving."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from consumer.partitioner import CachedPartitioner
from tests.faults.ledger import TurnLog, check_all
from tests.faults.process import ConsumerProcess, SetupFactory, consumers, message
from tests.integration.harness import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(150)]

SESSIONS = 8
ROUNDS = 12


def _on_every_partition(partitions: int) -> list[str]:
    """``SESSIONS`` fresh session ids whose keys hash onto every partition, so each consumer
    of the group has sessions to work on (with random ids, all eight land on one consumer's
    half about once in 256 runs, and the victim has no work when it dies)."""
    choose = CachedPartitioner()
    every = list(range(partitions))
    while True:
        suffix = uuid.uuid4().hex[:6]
        sessions = [f"group-{i}-{suffix}" for i in range(SESSIONS)]
        if {choose(s.encode(), every, every) for s in sessions} == set(every):
            return sessions


async def test_kill_one_of_two_consumers_under_load(fault_setup: SetupFactory) -> None:
    """Two consumers share four partitions while 8 sessions send 12 inputs each; one is
    killed with SIGKILL halfway; the survivor takes its partitions, and every input is applied
    once with every reply published in session order."""
    setup = await fault_setup(partitions=4)
    sessions = _on_every_partition(4)

    async with consumers() as started:
        a = ConsumerProcess(setup.env(), "a")
        b = ConsumerProcess(setup.env(), "b")
        started += [a, b]
        await a.start()
        await b.start()  # returns once b holds partitions: the group has both members

        async def load() -> None:
            for j in range(ROUNDS):
                await setup.produce([message(sid, f"m{j}") for sid in sessions])
                await asyncio.sleep(0.15)

        producing = asyncio.create_task(load())
        await wait_until(
            lambda: a.logged("turn applied") + b.logged("turn applied") >= SESSIONS * ROUNDS // 3
        )
        assert b.logged("turn applied") > 0  # the victim was doing work when it died
        await b.kill()
        await producing

        ledger = setup.ledger()
        await ledger.read(until=lambda led: led.has_replies({sid: ROUNDS for sid in sessions}),
                          within=60)
        assert await a.stop() == 0

    log = await TurnLog.read(setup.database_url, sessions)
    assert check_all(log, ledger, setup.inputs) == []
    for sid in sessions:
        assert ledger.texts(sid) == [f"{j + 1}:m{j}" for j in range(ROUNDS)]
