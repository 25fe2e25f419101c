"""Fixtures of the fault tests.

``fault_setup`` creates one test's topics, group and consumer environment on the servers the
session fixtures started, so a test names only the partitions it needs. ``restartable_broker``
is a broker of the test's own that keeps its data across ``restart()``: a node of Apache Kafka
with ``TURNFLOW_TEST_BROKER=kafka`` (``tests/fixtures/kafka_server.py``), else embedded Tansu on
a local S3 (``tests/fixtures/restartable_broker.py``). Both have ``bootstrap_servers``,
``restart(hard=, down_for=)``, ``stop()`` and ``embedded``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from consumer.errors import EmbeddedBrokerError
from tests.faults.process import FaultSetup, SetupFactory
from tests.fixtures.broker import TopicFactory, chosen_test_broker
from tests.fixtures.kafka_server import KafkaServer, KafkaServerError
from tests.fixtures.restartable_broker import RestartableBroker, S3ServerError
from tests.fixtures.servers import servers_unavailable


@pytest.fixture
def fault_setup(
    kafka_bootstrap: str, database_url: str, kafka_topics: TopicFactory, kafka_is_embedded: bool
) -> SetupFactory:
    """``await fault_setup(partitions=n)``: fresh topics (two partitions unless told) and group."""

    async def create(*, partitions: int = 2) -> FaultSetup:
        return await FaultSetup.create(
            kafka_topics, kafka_bootstrap, database_url,
            embedded=kafka_is_embedded, partitions=partitions,
        )

    return create


@pytest.fixture
def restartable_broker() -> Iterator[RestartableBroker | KafkaServer]:
    """A running broker of this test alone whose ``restart()`` keeps topics, records and
    committed offsets; it (and Tansu's S3 server, or Kafka's data directory) is gone when the
    test ends."""
    broker: RestartableBroker | KafkaServer = (
        KafkaServer() if chosen_test_broker() == "kafka" else RestartableBroker()
    )
    try:
        broker.start()
    except (S3ServerError, EmbeddedBrokerError, KafkaServerError) as exc:
        broker.stop()
        servers_unavailable(f"the restartable broker did not start: {exc}")
    try:
        yield broker
    finally:
        broker.stop()
