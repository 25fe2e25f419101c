"""A broker restart in the middle of the load, on a broker that keeps its data.

The consumer process keeps running while its broker is killed and started again: every
connection drops, new ones are refused while it is down, and the broker that comes back holds
the topics, records and committed group offsets it had. The restart catches turns in flight, so
some replies wait in the outbox and some offsets wait for their commit until it is back.

The broker is, by default, one of the test's own (``restartable_broker``: a node of Apache
Kafka under ``TURNFLOW_TEST_BROKER=kafka``, else the embedded Tansu broker on S3 storage),
killed with SIGKILL, left down for ``DOWN_S`` and started again on the same port and data.
With ``KAFKA_BOOTSTRAP_SERVERS`` set to a real Kafka and ``TURNFLOW_BROKER_RESTART_CMD`` to a
shell command that restarts it and returns once it is back (``docker restart kafka``,
``systemctl restart kafka``) the test restarts that broker instead.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import pytest

from tests.faults.midload import load_through_fault
from tests.faults.process import FaultSetup
from tests.fixtures.broker import TopicFactory
from tests.fixtures.kafka_server import KafkaServer
from tests.fixtures.restartable_broker import RestartableBroker

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(240)]

DOWN_S = 2.0  # how long the broker stays down; a restart takes seconds more


@dataclass
class BrokerToRestart:
    """The broker under test: where it is, whether it is embedded, how to restart it."""

    bootstrap: str
    embedded: bool
    restart: Callable[[], Awaitable[None]]
    within: float  # how long the replies may take to arrive once it is back


def _shell_restart(command: str) -> Callable[[], Awaitable[None]]:
    async def restart() -> None:
        shell = await asyncio.create_subprocess_shell(command)
        assert await asyncio.wait_for(shell.wait(), timeout=120) == 0, command

    return restart


@pytest.fixture
def broker_to_restart(request: pytest.FixtureRequest) -> Iterator[BrokerToRestart]:
    """The real broker of ``KAFKA_BOOTSTRAP_SERVERS`` restarted by
    ``TURNFLOW_BROKER_RESTART_CMD`` when both are set, else a restartable broker of its own."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    command = os.environ.get("TURNFLOW_BROKER_RESTART_CMD", "").strip()
    if bootstrap and command:
        yield BrokerToRestart(bootstrap, False, _shell_restart(command), within=120)
        return
    broker: RestartableBroker | KafkaServer = request.getfixturevalue("restartable_broker")

    async def restart() -> None:
        await asyncio.to_thread(broker.restart, hard=True, down_for=DOWN_S)

    yield BrokerToRestart(broker.bootstrap_servers, broker.embedded, restart, within=40)


async def test_broker_restart_mid_load_loses_nothing(
    broker_to_restart: BrokerToRestart, database_url: str
) -> None:
    """Inputs produced before and after a broker restart that comes while turns are in flight
    are each applied once, and every reply reaches outbound.messages in session order."""
    broker = broker_to_restart
    setup = await FaultSetup.create(
        TopicFactory(broker.bootstrap, "broker-restart"), broker.bootstrap, database_url,
        embedded=broker.embedded,
    )
    await load_through_fault(
        setup, broker.restart, label="brokerrestart", replies_within=broker.within
    )
