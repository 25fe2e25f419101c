"""One database filled by the real consumer for the inspector's tests (session scope: the fill
takes a few seconds, every test only reads it, and its conversations carry a prefix of their
own, so the other tests' conversations beside them change nothing)."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from tests.fixtures.broker import TopicFactory
from tests.inspect.filling import fill
from tests.integration.harness import ServiceSetup, service_topics


@dataclass(frozen=True)
class Filled:
    database_url: str
    prefix: str
    sessions: dict[str, list[str]]

    def all(self) -> set[str]:
        """Every conversation with a session row (all but those refused on their first
        input, which only the dead-lettered list shows)."""
        return {sid for kind, ids in self.sessions.items() if kind != "lost" for sid in ids}


@pytest.fixture(scope="session")
def filled(kafka_bootstrap: str, database_url: str, kafka_is_embedded: bool) -> Filled:
    """Conversations of every script in ``tests.inspect.filling``, under a prefix of their
    own, saved by a ``ConsumerService`` running the demo agent."""
    prefix = f"i{uuid.uuid4().hex[:6]}-"

    async def run() -> dict[str, list[str]]:
        topics = await service_topics(TopicFactory(kafka_bootstrap, "inspect"))
        setup = ServiceSetup(kafka_bootstrap, database_url, topics, kafka_is_embedded)
        return await fill(setup, prefix=prefix)

    # In a thread of its own: a module's other fixtures (Playwright's sync API) may hold an
    # event loop in this one.
    with ThreadPoolExecutor(1) as pool:
        sessions = pool.submit(asyncio.run, run()).result()
    return Filled(database_url, prefix, sessions)
