"""A consumer stopped while its saves wait on the database: every pooled connection comes back
before the store closes, and the inputs it abandoned are applied by the next consumer."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from consumer.turns.service import ConsumerService
from store import Store
from tests.integration.harness import (
    SetupFactory,
    counting_agent,
    message,
    running_consumer,
    verbatim_texts,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SESSIONS = 8


async def _until_saves_waiting(blocker: asyncpg.Connection, waiting: bool, *,
                               within: float, what: str) -> None:
    """Poll until some statement of this database does (or none does) wait for the lock
    ``blocker`` holds on ``sessions``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while await blocker.fetchval(
        "SELECT count(*) > 0 FROM pg_locks WHERE NOT granted"
        " AND relation = 'sessions'::regclass"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    ) != waiting:
        assert loop.time() < deadline, what
        await asyncio.sleep(0.05)


async def test_stopped_mid_save_returns_every_connection_and_loses_nothing(
    service_setup: SetupFactory,
) -> None:
    """Saves held up by a table lock when the consumer stops without draining: the shared
    save statement their turns were waiting on is cancelled, so the consumer's pool has
    nothing checked out when its run ends; a second consumer then applies every input."""
    setup = await service_setup(partitions=1)
    sessions = [f"halt{i}-{uuid.uuid4().hex[:6]}" for i in range(SESSIONS)]
    settings = setup.settings(drain_timeout_ms=0, max_in_flight=SESSIONS)
    store = await Store.connect(setup.database_url, pool_size=4, max_overflow=0)
    blocker = await asyncpg.connect(setup.database_url)
    try:
        await blocker.execute("BEGIN; LOCK TABLE sessions IN EXCLUSIVE MODE")
        service = ConsumerService(settings, counting_agent(), store=store)
        run = asyncio.create_task(service.run())
        await setup.produce([message(sid, "m0") for sid in sessions])
        await _until_saves_waiting(blocker, True, within=60, what="no save reached the lock")
        assert not run.done(), run
        service.stop()
        await asyncio.wait_for(run, 30)
        assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
        # The held-up save was cancelled, not left waiting (the server hears of it shortly).
        await _until_saves_waiting(blocker, False, within=30, what="a save still waits")
    finally:
        await blocker.close()
        await store.close()

    async with setup.reader() as replies, running_consumer(
        setup.settings(group_id=settings.group_id), counting_agent()
    ):
        values = await replies.until(
            lambda v: sum(len(t) for t in verbatim_texts(v).values()) >= SESSIONS
        )
    texts = verbatim_texts(values)
    assert {sid: texts.get(sid) for sid in sessions} == {sid: ["1:m0"] for sid in sessions}
