"""PostgreSQL fails over under load, and no customer's turn is lost.

A primary and a streaming standby (``tests/fixtures/postgres_pair.py``); the consumer (with its
relay) and, in the failovers, the scheduler get the multi-host URL with
``target_session_attrs=read-write``. Many conversations run at once while the fault comes:

- synchronous standby, primary killed, standby promoted: nothing lost, nothing applied twice,
  every reply in order; the time until turns flow again is printed;
- asynchronous standby held behind (the primary's WAL sender paused), primary killed, standby
  promoted: the turns the promotion lost are counted, and each lost input is run again from
  the database's position, so every conversation is whole afterwards;
- the same with the default settings (bursts merged) and customers who write only after each
  reply: a lost turn's message re-read with the next one waiting is answered as a burst, under a
  key of its own, so every message gets a reply a delivery worker passes on;
- the primary restarted (not promoted), and a primary refusing writes for a while (read-only,
  as during a switchover): turns wait and retry, nothing reaches the DLQ;
- a consumer whose group has no committed offsets in Kafka starts at the database's position,
  not at the start of the topic.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from store import migrate
from tests.faults.customers import Customers
from tests.faults.ledger import TurnLog, check_all
from tests.faults.process import (
    DLQ,
    ConsumerProcess,
    FaultSetup,
    SetupFactory,
    consumers,
    message,
    start_scheduler,
)
from tests.fixtures.postgres_pair import PostgresPair
from tests.integration.harness import OutboundReader, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(180)]

SESSIONS = 10
ROUNDS = 8
PAUSE_S = 0.25  # between rounds: a steady load, the fault lands in the middle of it


@pytest.fixture
def pairs() -> Iterator[list[PostgresPair]]:
    started: list[PostgresPair] = []
    try:
        yield started
    finally:
        for pair in started:
            pair.stop()


async def _pair_setup(
    fault_setup: SetupFactory, pairs: list[PostgresPair], *, synchronous: bool
) -> tuple[FaultSetup, PostgresPair]:
    pair = await asyncio.to_thread(PostgresPair(synchronous=synchronous).start)
    pairs.append(pair)
    await asyncio.to_thread(migrate.upgrade, pair.url)
    setup = await fault_setup()
    setup.database_url = pair.url
    return setup, pair


def _sessions(label: str) -> list[str]:
    suffix = uuid.uuid4().hex[:6]
    return [f"{label}-{i}-{suffix}" for i in range(SESSIONS)]


async def _steady(setup: FaultSetup, sessions: list[str], rounds: range) -> None:
    for j in rounds:
        await setup.produce([message(sid, f"m{j}") for sid in sessions])
        await asyncio.sleep(PAUSE_S)


def _timer_copies_differ_in(ledger: Any) -> set[str]:
    """The fields in which two copies of a timer (same session and key) differ."""
    first: dict[tuple[str, str], dict[str, Any]] = {}
    fields: set[str] = set()
    for record in ledger.schedule:
        seen = first.setdefault((record["session_id"], record["key"]), record)
        fields |= {k for k in seen.keys() | record.keys() if seen.get(k) != record.get(k)}
    return fields


async def _whole(
    setup: FaultSetup, sessions: list[str], *, within: float = 60, rerun: bool = False
) -> None:
    """Every conversation answered once per input, in order, nothing in the DLQ. ``rerun``:
    inputs were run again after a lossy failover, so a timer they set comes again under the
    same key, due from the re-run's clock (the scheduler keeps the later copy)."""
    ledger = setup.ledger()
    await ledger.read(
        until=lambda led: led.has_replies({sid: ROUNDS for sid in sessions}), within=within
    )
    async with OutboundReader(setup.bootstrap, setup.topics[DLQ]) as dlq:
        assert await dlq.settle(0.5) == []
    log = await TurnLog.read(setup.database_url, sessions)
    problems = check_all(log, ledger, setup.inputs)
    if rerun:
        assert _timer_copies_differ_in(ledger) <= {"at"}
        problems = [p for p in problems
                    if not (p.startswith("('schedule'") and "different contents" in p)]
    assert problems == []
    for sid in sessions:
        assert ledger.texts(sid) == [f"{j + 1}:m{j}" for j in range(ROUNDS)]


def _first_applied_after(process: ConsumerProcess, marker: str) -> bool:
    """A turn was applied after the (last) log line ``marker``."""
    seen = False
    for entry in process.logs:
        if entry.get("message") == marker:
            seen = True
        elif seen and entry.get("message") == "turn applied":
            return True
    return False


async def _failover(
    fault_setup: SetupFactory, pairs: list[PostgresPair], *, synchronous: bool
) -> dict[str, Any]:
    setup, pair = await _pair_setup(fault_setup, pairs, synchronous=synchronous)
    label = "sync" if synchronous else "async"
    sessions = _sessions(f"fo-{label}")
    half = ROUNDS // 2
    figures: dict[str, Any] = {}
    async with consumers() as started:
        process = ConsumerProcess(setup.env(), "consumer")
        started.append(process)
        await process.start()
        await start_scheduler(setup, process.env, started, max_idle="3600")
        await _steady(setup, sessions, range(half))
        await wait_until(lambda: process.logged("turn applied") >= SESSIONS * 2, within=60)
        resume_at = half
        if not synchronous:
            # The standby falls behind: a round is answered and committed on the primary, not
            # on the standby.
            assert await asyncio.to_thread(pair.pause_replication, True)
            await _steady(setup, sessions, range(half, half + 1))
            resume_at = half + 1
            await wait_until(
                lambda: process.logged("turn applied") >= SESSIONS * resume_at, within=60
            )
        applied_at_kill = process.logged("turn applied")
        killed_at = time.monotonic()
        await asyncio.to_thread(pair.kill_primary)
        survived = int(await asyncio.to_thread(
            pair.psql, pair.standby_port,
            "SELECT count(*) FROM turns WHERE session_id LIKE 'fo-%'",
        ))
        await asyncio.to_thread(pair.promote)
        producing = asyncio.create_task(_steady(setup, sessions, range(resume_at, ROUNDS)))
        marker = "the database failed over to a new timeline; restarting to continue from " \
                 "the positions it holds"
        await wait_until(lambda: _first_applied_after(process, marker), within=60)
        figures["recovery_s"] = time.monotonic() - killed_at
        await producing
        figures["lost_turns"] = applied_at_kill - survived
        figures["applied_at_kill"] = applied_at_kill
        starts = [e for e in process.logs
                  if e.get("message") == "partition started at the database's position"]
        figures["reread"] = sum(int(e.get("reread") or 0) for e in starts)
        await _whole(setup, sessions, rerun=not synchronous)
        connection = await asyncpg.connect(setup.database_url, timeout=10)
        try:
            async with asyncio.timeout(30):  # the scheduler stores the last round's timers
                while True:
                    timers = await connection.fetchval(
                        "SELECT count(DISTINCT session_id) FROM timers "
                        "WHERE session_id = ANY($1::text[])", sessions)
                    if timers >= SESSIONS:
                        break
                    await asyncio.sleep(0.2)
        finally:
            await connection.close()
        figures["sessions_with_timer"] = timers
        assert await process.stop() == 0
    print(f"\n{label} failover: {figures}")
    return figures


async def test_synchronous_failover_loses_nothing_and_applies_nothing_twice(
    fault_setup: SetupFactory, pairs: list[PostgresPair]
) -> None:
    """With a synchronous standby, a killed primary and a promotion cost a restart of the
    consumer's service: no input lost or applied twice, every reply in order, every session's
    timer on the promoted database."""
    figures = await _failover(fault_setup, pairs, synchronous=True)
    assert figures["lost_turns"] <= 0
    assert figures["sessions_with_timer"] == SESSIONS
    assert figures["recovery_s"] < 60


async def test_asynchronous_failover_runs_every_lost_input_again(
    fault_setup: SetupFactory, pairs: list[PostgresPair]
) -> None:
    """With an asynchronous standby behind, the promotion loses turns whose replies the
    customers already got; the consumer starts from the database's positions, runs those
    inputs again under the same reply keys, and every conversation is whole afterwards, its
    timer on the promoted database."""
    figures = await _failover(fault_setup, pairs, synchronous=False)
    assert figures["lost_turns"] > 0  # the fault did lose commits
    assert figures["reread"] >= figures["lost_turns"]
    assert figures["sessions_with_timer"] == SESSIONS


async def test_asynchronous_failover_with_bursts_answers_every_message_under_its_own_key(
    fault_setup: SetupFactory, pairs: list[PostgresPair]
) -> None:
    """Default settings (bursts merged), 24 customers who each write 8 messages, each after the
    reply to the one before, an asynchronous standby held behind, the primary killed and the
    standby promoted: the lost turns run again, some as bursts with the message that was
    waiting, and every message has a reply under a key no earlier reply used (a delivery worker
    deduping on keys passes each on), no key carries two texts, nothing is dead-lettered."""
    setup, pair = await _pair_setup(fault_setup, pairs, synchronous=False)
    sessions = [f"fo-burst-{i}-{uuid.uuid4().hex[:6]}" for i in range(24)]
    env = setup.env(AGENT="tests.faults.agent:echo_agent")
    del env["MERGE_BURSTS"]  # the default: bursts merged
    customers = Customers(setup, sessions, messages=8)
    figures: dict[str, Any] = {}
    async with consumers() as started:
        process = ConsumerProcess(env, "consumer")
        started.append(process)
        await process.start()
        talking = asyncio.create_task(customers.run(within=150))
        await wait_until(lambda: customers.progress() >= 2 * len(sessions), within=60)
        # The standby falls behind while customers go on: their answers are committed on the
        # primary only.
        assert await asyncio.to_thread(pair.pause_replication, True)
        answered = customers.progress()
        await wait_until(lambda: customers.progress() >= answered + 2 * len(sessions),
                         within=60)
        figures["applied_at_kill"] = process.logged("turn applied")
        await asyncio.to_thread(pair.kill_primary)
        survived = int(await asyncio.to_thread(
            pair.psql, pair.standby_port,
            "SELECT count(*) FROM turns WHERE session_id LIKE 'fo-burst-%'",
        ))
        await asyncio.to_thread(pair.promote)
        await talking
        async with OutboundReader(setup.bootstrap, setup.topics[DLQ]) as dlq:
            assert await dlq.settle(0.5) == []
        assert await process.stop() == 0
    figures["lost_turns"] = figures["applied_at_kill"] - survived
    log = await TurnLog.read(setup.database_url, sessions)
    bursts = [row for row in log.rows if row.applied and "|" in json.dumps(row.messages)]
    figures["burst_turns"] = len(bursts)
    figures["keys_delivered"] = len(customers.delivered)
    print(f"\nasync failover, bursts merged: {figures}")
    assert figures["lost_turns"] > 0  # the promotion did lose answered turns
    assert customers.problems() == []


async def _ride_out(
    fault_setup: SetupFactory, pairs: list[PostgresPair], label: str, fault: Any
) -> ConsumerProcess:
    setup, pair = await _pair_setup(fault_setup, pairs, synchronous=False)
    sessions = _sessions(label)
    async with consumers() as started:
        process = ConsumerProcess(setup.env(), "consumer")
        started.append(process)
        await process.start()
        producing = asyncio.create_task(_steady(setup, sessions, range(ROUNDS)))
        await wait_until(lambda: process.logged("turn applied") >= SESSIONS, within=60)
        await fault(pair)
        await producing
        await _whole(setup, sessions)
        assert process.returncode is None
        assert await process.stop() == 0
    assert process.logged("input sent to the DLQ") == 0
    return process


async def test_primary_restart_under_load_costs_retries_only(
    fault_setup: SetupFactory, pairs: list[PostgresPair]
) -> None:
    """A crash-restart of the primary (same timeline, nothing lost) is waited out by retries:
    no restart of the service, nothing in the DLQ, every conversation whole."""

    async def restart(pair: PostgresPair) -> None:
        await asyncio.to_thread(pair.restart_primary)

    process = await _ride_out(fault_setup, pairs, "fo-restart", restart)
    assert process.logged("partition started at the database's position") == 0


async def test_read_only_primary_makes_turns_wait_not_dead_letter(
    fault_setup: SetupFactory, pairs: list[PostgresPair]
) -> None:
    """A primary that refuses writes for a while (default_transaction_read_only, as during a
    managed switchover) makes turns retry (SQLSTATE 25006 is an outage), never dead-letter."""

    async def read_only(pair: PostgresPair) -> None:
        await asyncio.to_thread(pair.read_only, True)
        await asyncio.sleep(2.0)
        await asyncio.to_thread(pair.read_only, False)

    process = await _ride_out(fault_setup, pairs, "fo-readonly", read_only)
    retried = [e for e in process.logs
               if e.get("message") == "input failed; retrying this session after a delay"]
    assert retried and all(e.get("reason") == "infrastructure" for e in retried), [
        (e.get("reason"), e.get("error")) for e in retried]


async def test_a_group_without_kafka_offsets_starts_at_the_database_position(
    fault_setup: SetupFactory,
) -> None:
    """Kafka lost the group's committed offsets (or a restarted coordinator still loads them
    and the client reads "none"): the consumer starts each partition at the database's
    position, not at the start of the topic, so nothing already answered is read again."""
    setup = await fault_setup()
    sessions = _sessions("fo-offsets")
    async with consumers() as started:
        first = ConsumerProcess(setup.env(), "consumer")
        started.append(first)
        await first.start()
        await setup.produce([message(sid, f"m{j}") for j in range(4) for sid in sessions])
        await wait_until(lambda: first.logged("turn applied") >= 4 * SESSIONS, within=60)
        assert await first.stop() == 0

        # The same database positions under a group Kafka has no offsets for.
        lost = f"{setup.group_id}-lost"
        connection = await asyncpg.connect(setup.database_url, timeout=10)
        try:
            copied = await connection.execute(
                "INSERT INTO source_positions (consumer_group, topic, partition, next_offset) "
                "SELECT $1, topic, partition, next_offset FROM source_positions "
                "WHERE consumer_group = $2", lost, setup.group_id)
        finally:
            await connection.close()
        assert copied == "INSERT 0 2"
        second = ConsumerProcess({**setup.env(), "GROUP_ID": lost}, "consumer")
        started.append(second)
        await second.start()
        await wait_until(
            lambda: second.logged("partition started at the database's position") == 2
        )
        starts = [e for e in second.logs
                  if e.get("message") == "partition started at the database's position"]
        assert all(e.get("kafka_committed") is None for e in starts)
        assert sum(int(e["position"]) for e in starts) == 4 * SESSIONS
        await setup.produce([message(sid, f"m{j}") for j in range(4, 6) for sid in sessions])
        await wait_until(lambda: second.logged("turn applied") >= 2 * SESSIONS, within=60)
        assert await second.stop() == 0
    assert second.logged("replay skipped; outbox re-flushed") == 0
    assert second.logged("turn applied") == 2 * SESSIONS
