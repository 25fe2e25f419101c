"""PostgreSQL drops the consumer's connections while turns are being saved and published."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from tests.faults.ledger import TurnLog, check_all
from tests.faults.process import DLQ, ConsumerProcess, SetupFactory, consumers, message
from tests.integration.harness import OutboundReader, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(120)]

SESSIONS = 6
ROUNDS = 10
MAX_ROUNDS = 60

# Every other connection to the test database: the consumer's pool, its relay's transaction.
TERMINATE = """
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS killed,
       count(*) FILTER (WHERE state <> 'idle') AS busy
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
"""


async def test_connection_loss_mid_transaction_loses_and_doubles_nothing(
    fault_setup: SetupFactory,
) -> None:
    """Terminating every consumer connection (pg_terminate_backend) again and again while
    inputs are being applied costs retries only: no input goes to the DLQ, each is applied
    once, and every saved reply is published in order."""
    setup = await fault_setup()
    suffix = uuid.uuid4().hex[:6]
    sessions = [f"pgloss-{i}-{suffix}" for i in range(SESSIONS)]
    admin = await asyncpg.connect(setup.database_url, timeout=10)
    killed = busy = rounds = 0
    try:
        async with consumers() as started:
            process = ConsumerProcess(setup.env(), "consumer")
            started.append(process)
            await process.start()

            async def load() -> None:
                # Turns share their round trips (grouped loads and saves), so a connection is
                # busy only part of the time: produce past ROUNDS until a cut caught one busy.
                nonlocal rounds
                while rounds < ROUNDS or (busy == 0 and rounds < MAX_ROUNDS):
                    await setup.produce([message(sid, f"m{rounds}") for sid in sessions])
                    rounds += 1
                    await asyncio.sleep(0.1)

            producing = asyncio.create_task(load())
            await wait_until(lambda: process.logged("turn applied") > 0)
            while not producing.done():
                row = await admin.fetchrow(TERMINATE)
                killed, busy = killed + row["killed"], busy + row["busy"]
                await asyncio.sleep(0.05)
            await producing

            ledger = setup.ledger()
            await ledger.read(
                until=lambda led: led.has_replies({sid: rounds for sid in sessions}), within=60
            )
            async with OutboundReader(setup.bootstrap, setup.topics[DLQ]) as dlq:
                assert await dlq.settle(0.5) == []
            assert await process.stop() == 0
    finally:
        await admin.close()

    assert killed > 0 and busy > 0  # connections were in use when they were cut
    log = await TurnLog.read(setup.database_url, sessions)
    assert check_all(log, ledger, setup.inputs) == []
    for sid in sessions:
        assert ledger.texts(sid) == [f"{j + 1}:m{j}" for j in range(rounds)]
