"""A group of three consumers on the broker's group coordinator, with timers that fire.

Three ``turnflow consume`` processes share one group and six partitions, and a ``turnflow
schedule`` process fires the timers, while 24 conversations of one flow each send several
inputs: one consumer is killed with SIGKILL mid-load; all three are restarted one after the
other (a rolling deploy); the broker itself is killed with SIGKILL and started again on the
same data while turns are in flight. Each time the fault ledger (``ledger.py``) and the turn log
must show every input applied once, every reply published once per key and in order, and each
conversation's last timer woken exactly once.

Every input is produced well before the timer of the conversation's previous turn is due
(``TIMER_MS``), so a wake always comes after the inputs in its partition: an earlier timer that
fires late is refused as stale and the replies are exactly ``1:m0 … N:m<N-1>, N:woke``. On
Apache Kafka (``TURNFLOW_TEST_BROKER=kafka``) the coordinator is Kafka's own, and the producers
are idempotent.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import pytest

from consumer.partitioner import CachedPartitioner
from tests.faults.ledger import TurnLog, check_all, timers_fired_once
from tests.faults.process import ConsumerProcess, FaultSetup, consumers, message, start_scheduler
from tests.fixtures.broker import TopicFactory
from tests.fixtures.kafka_server import KafkaServer
from tests.fixtures.restartable_broker import RestartableBroker
from tests.integration.harness import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(240)]

PARTITIONS = 6
SESSIONS = 24
TIMER_MS = 8_000  # far longer than any pause between two inputs of one conversation


def _sessions(label: str) -> list[str]:
    """``SESSIONS`` fresh ids whose keys land on every partition, so every member has work."""
    choose = CachedPartitioner()
    every = list(range(PARTITIONS))
    while True:
        suffix = uuid.uuid4().hex[:6]
        sessions = [f"{label}-{i}-{suffix}" for i in range(SESSIONS)]
        if {choose(s.encode(), every, every) for s in sessions} == set(every):
            return sessions


def _applied(group: list[ConsumerProcess]) -> int:
    return sum(p.logged("turn applied") for p in group)


async def _run_group_through(
    setup: FaultSetup, fault: Callable[[list[ConsumerProcess]], Awaitable[None]], label: str,
    *, rounds: int, pace: float, delay_ms: int, after_fault: int = 0,
    replies_within: float = 90.0, timer_ms: int = TIMER_MS,
) -> None:
    """A scheduler and three consumers; ``rounds`` inputs per conversation, a round every
    ``pace`` seconds, each turn held ``delay_ms``; ``fault(started)`` once a round's worth of
    turns is applied while the rounds keep coming (the last ``after_fault`` rounds are produced
    only once the fault is over). Then the ledger, the turn log and the timers are checked."""
    sessions = _sessions(label)
    env = setup.env(AGENT="tests.faults.agent:timer_agent", FAULT_TIMER_MS=str(timer_ms))
    async with consumers() as started:
        await start_scheduler(setup, env, started, max_idle="1")
        for i in range(3):
            started.append(ConsumerProcess(env, f"c{i}"))
            await started[-1].start()

        async def load(first: int, last: int) -> None:
            for j in range(first, last):
                await setup.produce([message(sid, f"m{j}", delay_ms=delay_ms) for sid in sessions])
                await asyncio.sleep(pace)

        producing = asyncio.create_task(load(0, rounds - after_fault))
        try:
            await wait_until(lambda: _applied(started) >= SESSIONS, within=60)
            await fault(started)
            await producing
        finally:
            producing.cancel()
        await load(rounds - after_fault, rounds)

        ledger = setup.ledger()
        await ledger.read(
            until=lambda led: led.has_replies({sid: rounds + 1 for sid in sessions}),
            within=replies_within + timer_ms / 1000, settle=2.0,
        )
        for process in started:
            if process.returncode is None:
                assert await process.stop() == 0, process.raw[-20:]

    log = await TurnLog.read(setup.database_url, sessions)
    assert check_all(log, ledger, setup.inputs) == []
    assert timers_fired_once(log, sessions) == []
    for sid in sessions:
        assert ledger.texts(sid) == [
            *(f"{j + 1}:m{j}" for j in range(rounds)), f"{rounds}:woke"
        ], sid


async def test_kill_one_of_three_consumers_mid_load(fault_setup) -> None:
    """One of three members is killed with SIGKILL while its turns are in flight; the group
    coordinator hands its partitions to the other two."""
    setup = await fault_setup(partitions=PARTITIONS)

    async def kill_one(started: list[ConsumerProcess]) -> None:
        victim = started[3]  # the third consumer (started[0] is the scheduler)
        await wait_until(lambda: victim.logged("turn applied") > 0, within=30)
        before = _applied(started)
        await victim.kill()
        assert before < SESSIONS * 6  # the kill came mid-load

    await _run_group_through(setup, kill_one, "groupkill", rounds=6, pace=0.5, delay_ms=150)


async def test_rolling_restart_of_all_three_consumers(fault_setup) -> None:
    """Each member in turn is stopped with SIGTERM and replaced by a new process that joins the
    group, while inputs keep coming; every turn is applied once across the six generations."""
    setup = await fault_setup(partitions=PARTITIONS)

    async def roll(started: list[ConsumerProcess]) -> None:
        for index in (1, 2, 3):
            old = started[index]
            assert await old.stop() == 0, old.raw[-20:]
            fresh = ConsumerProcess(old.env, f"{old.name}'")  # same environment and group
            started.append(fresh)
            await fresh.start()

    await _run_group_through(setup, roll, "rolling", rounds=10, pace=1.5, delay_ms=150)


async def test_broker_killed_and_restarted_under_a_group(
    restartable_broker: RestartableBroker | KafkaServer, database_url: str
) -> None:
    """The broker (the group's coordinator) is killed with SIGKILL while the three members have
    turns in flight and started again on the same data; the members rejoin and nothing is lost
    or answered twice."""
    broker = restartable_broker
    bootstrap = broker.bootstrap_servers
    setup = await FaultSetup.create(
        TopicFactory(bootstrap, "group-broker-restart"), bootstrap, database_url,
        embedded=broker.embedded, partitions=PARTITIONS,
    )

    async def restart(started: list[ConsumerProcess]) -> None:
        before = _applied(started)
        await asyncio.to_thread(broker.restart, hard=True, down_for=2.0)
        assert before < SESSIONS * 3  # turns of the first rounds were still in flight
        assert all(p.returncode is None for p in started)  # every process rode it out

    # The first three rounds go in at once and take a while (400 ms a turn); the broker is
    # killed among them; the last three are produced once it is back, well within the timers
    # of the third round's turns (longer here, as a restart takes seconds).
    await _run_group_through(setup, restart, "groupbroker", rounds=6, pace=0.0, delay_ms=400,
                             after_fault=3, replies_within=120, timer_ms=15_000)
