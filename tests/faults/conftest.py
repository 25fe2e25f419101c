"""Fixtures of the fault tests.

``fault_setup`` creates one test's topics, group and consumer environment on the servers the
session fixtures started, so a test names only the partitions it needs.
"""

from __future__ import annotations

import pytest

from tests.faults.process import FaultSetup, SetupFactory
from tests.fixtures.broker import TopicFactory


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
