"""A broker restart in the middle of the load, on a broker that keeps its data.

The embedded Tansu broker is memory-only: restarting it loses every topic and offset, which is
not a restart a production broker goes through. So this runs only against a real broker named
by ``KAFKA_BOOTSTRAP_SERVERS`` together with ``TURNFLOW_BROKER_RESTART_CMD``, a shell command
that restarts it and returns once it is back (``docker restart kafka``,
``systemctl restart kafka``); anywhere else it is skipped with that reason.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from tests.faults.ledger import TurnLog, check_all
from tests.faults.process import ConsumerProcess, SetupFactory, consumers, message

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(240)]

SESSIONS = 4
ROUNDS = 8


async def test_broker_restart_mid_load_loses_nothing(
    kafka_is_embedded: bool, fault_setup: SetupFactory,
) -> None:
    """Inputs produced before and after a broker restart are each applied once and every
    reply reaches outbound.messages in session order once the broker is back."""
    restart = os.environ.get("TURNFLOW_BROKER_RESTART_CMD", "").strip()
    if kafka_is_embedded or not restart:
        pytest.skip(
            "broker restart needs a broker that keeps its data: set KAFKA_BOOTSTRAP_SERVERS to "
            "a real Kafka and TURNFLOW_BROKER_RESTART_CMD to the command restarting it (the "
            "embedded broker is memory-only, so its restart is data loss, not a restart)"
        )
    setup = await fault_setup()
    suffix = uuid.uuid4().hex[:6]
    sessions = [f"brokerrestart-{i}-{suffix}" for i in range(SESSIONS)]
    half = ROUNDS // 2
    async with consumers() as started:
        process = ConsumerProcess(setup.env(), "consumer")
        started.append(process)
        await process.start()
        await setup.produce([message(sid, f"m{j}") for j in range(half) for sid in sessions])
        shell = await asyncio.create_subprocess_shell(restart)
        assert await asyncio.wait_for(shell.wait(), timeout=120) == 0
        await setup.produce(
            [message(sid, f"m{j}") for j in range(half, ROUNDS) for sid in sessions]
        )
        ledger = setup.ledger()
        await ledger.read(until=lambda led: led.has_replies({sid: ROUNDS for sid in sessions}),
                          within=120)
        assert await process.stop() == 0

    log = await TurnLog.read(setup.database_url, sessions)
    assert check_all(log, ledger, setup.inputs) == []
    for sid in sessions:
        assert ledger.texts(sid) == [f"{j + 1}:m{j}" for j in range(ROUNDS)]
