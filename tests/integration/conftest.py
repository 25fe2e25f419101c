"""Fixtures of the integration tests.

``service_setup`` creates one test's inbound, outbound and DLQ topics on the session's broker
and bundles them with the servers, so a test names only the partitions it needs.
"""

from __future__ import annotations

import pytest

from tests.fixtures.broker import TopicFactory
from tests.integration.harness import ServiceSetup, SetupFactory, service_topics


@pytest.fixture
def service_setup(
    kafka_bootstrap: str, database_url: str, kafka_topics: TopicFactory, kafka_is_embedded: bool
) -> SetupFactory:
    """``await service_setup(partitions=n)``: fresh topics (three partitions unless told)."""

    async def create(*, partitions: int = 3) -> ServiceSetup:
        topics = await service_topics(kafka_topics, partitions=partitions)
        return ServiceSetup(kafka_bootstrap, database_url, topics, kafka_is_embedded)

    return create
