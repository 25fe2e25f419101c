"""Every re-read the service promises is safe keeps every customer's message answered.

Customers write one message at a time, each after the reply to the one before
(``tests.faults.customers``), with the default settings (bursts merged) and an agent whose
replies say back the messages they answer. Mid-conversation the inputs are read again:

- a consumer killed between publishing a turn's replies and committing its offset;
- a group whose committed offsets Kafka lost, started at the database's positions;
- the database restored from a backup older than Kafka's offsets: turns whose replies left are
  gone, and are run again with the customers' next messages already waiting behind them.

Each time every message must have a reply that a delivery worker deduping on ``key`` passes on,
and no key may carry two texts.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from consumer.turns.crash import CRASH_EXIT_CODE
from store import migrate
from tests.faults.customers import Customers
from tests.faults.process import DLQ, ConsumerProcess, FaultSetup, SetupFactory, consumers
from tests.integration.harness import OutboundReader, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(240)]

CUSTOMERS = 12
MESSAGES = 6


def _env(setup: FaultSetup, **overrides: str) -> dict[str, str]:
    """The echo agent with the default burst settings."""
    env = setup.env(AGENT="tests.faults.agent:echo_agent", **overrides)
    del env["MERGE_BURSTS"]
    return env


async def _converse(
    setup: FaultSetup, label: str,
    fault: Callable[[Customers, list[ConsumerProcess]], Awaitable[None]],
) -> Customers:
    """Customers talk to a consumer; once each has two answers, ``fault`` runs (it leaves a
    consumer serving them); then every customer finishes and the checks run."""
    customers = Customers(setup, [f"{label}-{i}-{uuid.uuid4().hex[:6]}" for i in range(CUSTOMERS)],
                          messages=MESSAGES)
    async with consumers() as started:
        first = ConsumerProcess(_env(setup), "consumer")
        started.append(first)
        await first.start()
        talking = asyncio.create_task(customers.run(within=150))
        await wait_until(lambda: customers.progress() >= 2 * CUSTOMERS, within=60)
        await fault(customers, started)
        await talking
        async with OutboundReader(setup.bootstrap, setup.topics[DLQ]) as dlq:
            assert await dlq.settle(0.5) == []
        for process in started:
            if process.returncode is None:
                assert await process.stop() == 0
    assert customers.problems() == []
    return customers


async def test_a_consumer_killed_between_publishing_and_committing(
    fault_setup: SetupFactory,
) -> None:
    """A consumer that dies right after publishing a turn's replies, before its offset is
    committed: the one that takes over reads the turn again, finds it saved and skips it,
    with the customer's next message perhaps waiting behind it; every message is answered."""
    setup = await fault_setup()

    async def crash(customers: Customers, started: list[ConsumerProcess]) -> None:
        crashing = ConsumerProcess(_env(setup, TURNFLOW_CRASH_AT="after_publish:3"), "crashing")
        started.append(crashing)
        await started[0].stop()
        await crashing.start(assigned=False)
        assert await crashing.wait(within=60) == CRASH_EXIT_CODE, crashing.raw[-20:]
        survivor = ConsumerProcess(_env(setup), "restarted")
        started.append(survivor)
        await survivor.start()

    await _converse(setup, "reread-crash", crash)


async def test_a_group_whose_offsets_kafka_lost(fault_setup: SetupFactory) -> None:
    """Mid-conversation the consumer comes back under a group Kafka has no offsets for (the
    database's positions copied to it): it starts at those positions and every message is
    answered once under a key of its own."""
    setup = await fault_setup()

    async def lose_offsets(customers: Customers, started: list[ConsumerProcess]) -> None:
        await started[0].stop()
        lost = f"{setup.group_id}-lost"
        connection = await asyncpg.connect(setup.database_url, timeout=10)
        try:
            await connection.execute(
                "INSERT INTO source_positions (consumer_group, topic, partition, next_offset) "
                "SELECT $1, topic, partition, next_offset FROM source_positions "
                "WHERE consumer_group = $2", lost, setup.group_id)
        finally:
            await connection.close()
        second = ConsumerProcess(_env(setup, GROUP_ID=lost), "second")
        started.append(second)
        await second.start()

    await _converse(setup, "reread-offsets", lose_offsets)


@asynccontextmanager
async def _own_database(server_url: str) -> AsyncIterator[tuple[str, str]]:
    """A migrated database of this test alone and the URL of a second name for its backup,
    both dropped afterwards."""
    name = f"turnflow_r_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(server_url, timeout=10)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
        backup = make_url(server_url).set(database=f"{name}_b").render_as_string(
            hide_password=False)
        await asyncio.to_thread(migrate.upgrade, url)
        try:
            yield url, backup
        finally:
            for db in (name, f"{name}_b"):
                await admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    finally:
        await admin.close()


async def test_a_database_restored_from_a_backup_older_than_kafkas_offsets(
    fault_setup: SetupFactory,
) -> None:
    """The database is restored from a backup taken two answers earlier, behind the offsets
    Kafka committed since: the consumer starts at the backup's positions and runs again the
    turns whose replies the customers have, now with their next message waiting (a burst);
    every message has a reply delivery passes on, none under a key another text used."""
    setup = await fault_setup()
    server = make_url(setup.database_url).set(database="postgres").render_as_string(
        hide_password=False)
    async with _own_database(server) as (url, backup):
        setup.database_url = url

        async def restore(customers: Customers, started: list[ConsumerProcess]) -> None:
            await started[0].stop()  # no connection may stay on the database it copies
            admin = await asyncpg.connect(server, timeout=10)
            try:
                await admin.execute(f'CREATE DATABASE "{make_url(backup).database}" '
                                    f'TEMPLATE "{make_url(url).database}"')
            finally:
                await admin.close()
            later = ConsumerProcess(_env(setup), "after-backup")
            started.append(later)
            await later.start()
            answered = customers.progress()
            await wait_until(lambda: customers.progress() >= answered + 2 * CUSTOMERS,
                             within=60)
            await later.stop()
            restored = ConsumerProcess(_env(setup, DATABASE_URL=backup), "restored")
            started.append(restored)
            await restored.start()

        customers = await _converse(setup, "reread-backup", restore)
    bursts = [r for r in customers.delivered.values() if "|" in r["text"]]
    print(f"\nrestore from an older backup: {len(bursts)} bursts re-run under keys of their own")
    assert bursts, "the restore re-read no message together with a waiting one"
