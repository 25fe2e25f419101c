"""The broker unreachable for seconds in the middle of the load, then back with its data.

Every connection drops, new ones are refused, and later the same broker answers again: the
network side of a broker restart, held longer than a restart takes (``test_broker_restart.py``
kills and restarts the broker process itself). A dedicated broker (Apache Kafka under
``TURNFLOW_TEST_BROKER=kafka``, else embedded Tansu) is reached only through a ``TcpProxy``: the
broker advertises the proxy's port (``advertised=``),
so the clients' reconnections to the address in the metadata go through the proxy too, and
``cut()`` really cuts them all off. The outage outlasts the consumer's group session timeout and
catches turns between their save and their publish, so replies wait in the outbox until the
link is back.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiokafka.client import AIOKafkaClient

from consumer.devchat.embedded_broker import EmbeddedBroker, free_port
from consumer.errors import EmbeddedBrokerError
from tests.faults.midload import load_through_fault
from tests.faults.process import FaultSetup
from tests.faults.tcp_proxy import TcpProxy
from tests.fixtures.broker import TopicFactory, chosen_test_broker
from tests.fixtures.kafka_server import KafkaServer, KafkaServerError
from tests.fixtures.servers import servers_unavailable

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(120)]

OUTAGE_S = 4.0  # longer than the consumer's SESSION_TIMEOUT_MS (3 s)


@pytest.fixture
async def proxied_broker() -> AsyncIterator[tuple[TcpProxy, bool]]:
    """A dedicated broker reachable (and advertised) only through a ``TcpProxy``, and whether
    it is the embedded one."""
    broker_port = free_port()
    proxy = TcpProxy("127.0.0.1", broker_port)
    await proxy.start()
    broker: EmbeddedBroker | KafkaServer = (
        KafkaServer(port=broker_port, advertised=proxy.address)
        if chosen_test_broker() == "kafka"
        else EmbeddedBroker(broker_port, advertised=proxy.address)
    )
    try:
        try:
            await asyncio.to_thread(broker.start)
        except (EmbeddedBrokerError, KafkaServerError) as exc:
            servers_unavailable(f"the dedicated broker did not start: {exc}")
        client = AIOKafkaClient(bootstrap_servers=proxy.address)
        await client.bootstrap()
        try:
            advertised = {(b.host, b.port) for b in client.cluster.brokers()}
        finally:
            await client.close()
        # Were the broker's own port advertised, clients would bypass the proxy after the
        # first metadata answer and a cut would not cut them off.
        assert advertised == {(proxy.host, proxy.port)}
        yield proxy, not isinstance(broker, KafkaServer)
    finally:
        await proxy.stop()
        await asyncio.to_thread(broker.stop)


async def test_broker_outage_mid_load_loses_nothing(
    proxied_broker: tuple[TcpProxy, bool], database_url: str
) -> None:
    """With the broker unreachable for 4 s while turns are in flight, every input is applied
    once and every reply reaches outbound.messages in session order once it is back."""
    proxy, embedded = proxied_broker
    bootstrap = proxy.address
    setup = await FaultSetup.create(
        TopicFactory(bootstrap, "broker-outage"), bootstrap, database_url, embedded=embedded
    )

    async def outage() -> None:
        severed = await proxy.cut()
        await asyncio.sleep(OUTAGE_S)
        await proxy.restore()
        assert severed > 0  # the consumer's connections really were cut

    await load_through_fault(setup, outage, label="outage", replies_within=45)
