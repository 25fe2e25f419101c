"""The broker unreachable for seconds in the middle of the load, then back with its data.

Every connection drops, new ones are refused, and later the same broker answers again: the
network side of a broker restart, held longer than a restart takes (``test_broker_restart.py``
kills and restarts the broker process itself). A dedicated embedded broker is reached only
through a ``TcpProxy``: the broker advertises the proxy's port (``EmbeddedBroker(advertised=)``),
so the clients' reconnections to the address in the metadata go through the proxy too, and
``cut()`` really cuts them all off. The outage outlasts the consumer's group session timeout and
catches turns between their save and their publish, so replies wait in the outbox until the
link is back.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from aiokafka.client import AIOKafkaClient

from consumer.embedded_broker import EmbeddedBroker, free_port
from consumer.errors import EmbeddedBrokerError
from tests.faults.ledger import Ledger, TurnLog, check_all
from tests.faults.process import (
    MESSAGES,
    SCHEDULE,
    ConsumerProcess,
    FaultSetup,
    consumers,
    message,
)
from tests.faults.tcp_proxy import TcpProxy
from tests.fixtures.broker import TopicFactory
from tests.fixtures.servers import servers_unavailable
from tests.integration.harness import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(120)]

SESSIONS = 6
ROUNDS = 8
OUTAGE_S = 4.0  # longer than the consumer's SESSION_TIMEOUT_MS (3 s)
DELAY_MS = 150  # per turn, so the first half is still in flight when the link is cut


@pytest.fixture
async def proxied_broker() -> AsyncIterator[TcpProxy]:
    """A dedicated embedded broker reachable (and advertised) only through a ``TcpProxy``."""
    broker_port = free_port()
    proxy = TcpProxy("127.0.0.1", broker_port)
    await proxy.start()
    broker = EmbeddedBroker(broker_port, advertised=proxy.address)
    try:
        try:
            await asyncio.to_thread(broker.start)
        except EmbeddedBrokerError as exc:
            servers_unavailable(f"the dedicated embedded broker did not start: {exc}")
        client = AIOKafkaClient(bootstrap_servers=proxy.address)
        await client.bootstrap()
        try:
            advertised = {(b.host, b.port) for b in client.cluster.brokers()}
        finally:
            await client.close()
        # Were the broker's own port advertised, clients would bypass the proxy after the
        # first metadata answer and a cut would not cut them off.
        assert advertised == {(proxy.host, proxy.port)}
        yield proxy
    finally:
        await proxy.stop()
        await asyncio.to_thread(broker.stop)


async def test_broker_outage_mid_load_loses_nothing(
    proxied_broker: TcpProxy, database_url: str
) -> None:
    """With the broker unreachable for 4 s while turns are in flight, every input is applied
    once and every reply reaches outbound.messages in session order once it is back."""
    proxy = proxied_broker
    bootstrap = proxy.address
    setup = await FaultSetup.create(
        TopicFactory(bootstrap, "broker-outage"), bootstrap, database_url, embedded=True
    )
    suffix = uuid.uuid4().hex[:6]
    sessions = [f"outage-{i}-{suffix}" for i in range(SESSIONS)]
    half = ROUNDS // 2
    first_half = SESSIONS * half

    async with consumers() as started:
        process = ConsumerProcess(setup.env(), "consumer")
        started.append(process)
        await process.start()
        await setup.produce([
            message(sid, f"m{j}", delay_ms=DELAY_MS) for j in range(half) for sid in sessions
        ])
        await wait_until(lambda: process.logged("turn applied") >= SESSIONS, within=30)

        severed = await proxy.cut()
        applied_at_cut = process.logged("turn applied")
        await asyncio.sleep(OUTAGE_S)
        await proxy.restore()
        assert severed > 0  # the consumer's connections really were cut
        assert applied_at_cut < first_half  # the cut came in the middle of the load
        assert process.returncode is None  # it rode out the outage

        await setup.produce(
            [message(sid, f"m{j}") for j in range(half, ROUNDS) for sid in sessions]
        )
        ledger = Ledger(bootstrap, messages_topic=setup.topics[MESSAGES],
                        schedule_topic=setup.topics[SCHEDULE])
        await ledger.read(until=lambda led: led.has_replies({sid: ROUNDS for sid in sessions}),
                          within=45)
        assert await process.stop() == 0

    log = await TurnLog.read(database_url, sessions)
    assert check_all(log, ledger, setup.inputs) == []
    for sid in sessions:
        assert ledger.texts(sid) == [f"{j + 1}:m{j}" for j in range(ROUNDS)]
