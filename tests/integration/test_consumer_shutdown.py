"""A consumer stopped while its saves wait on the database: every pooled connection comes back
before the store closes, and the inputs it abandoned are applied by the next consumer."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from consumer.service import ConsumerService
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


async def _lock_waiters(connection: asyncpg.Connection) -> int:
    return int(await connection.fetchval("SELECT count(*) FROM pg_locks WHERE NOT granted"))


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
        deadline = asyncio.get_running_loop().time() + 60
        while await _lock_waiters(blocker) == 0:
            assert not run.done(), run
            assert asyncio.get_running_loop().time() < deadline, "no save reached the lock"
            await asyncio.sleep(0.05)
        service.stop()
        await asyncio.wait_for(run, 30)
        assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
        # The held-up save was cancelled, not left waiting (the server hears of it shortly).
        while await _lock_waiters(blocker) > 0:
            assert asyncio.get_running_loop().time() < deadline + 30, "a save still waits"
            await asyncio.sleep(0.05)
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
