"""A plan's model turns per minute, across two consumers of one group, end to end: the real
consumers, the registry's agents in PostgreSQL, the shared count in ``workspace_model_minutes``."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from consumer import metrics
from store import Store
from store.hosting import Hosting
from store.urls import plain_url
from tests.integration.harness import SetupFactory, running_consumer
from tests.integration.test_consumer_registry import _document, _msg, _put, _texts
from tests.integration.test_model_outages import dead_letters

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

PER_MINUTE = 6


async def test_two_consumers_never_pass_a_plans_turns_per_minute_together(
    service_setup: SetupFactory,
) -> None:
    """Twelve conversations of a free workspace (six turns a minute) and four of a pro one
    (no cap) write at once to two consumers sharing four partitions. The pro workspace is
    answered at once; the free one gets six turns in the first minute between both consumers
    and the rest in the next; no minute's count passes six, nothing is dropped or
    dead-lettered, and each conversation is answered once."""
    setup = await service_setup(partitions=4)
    tag = uuid.uuid4().hex[:8]
    free_ws, pro_ws = f"free-{tag}", f"pro-{tag}"
    free_bot, pro_bot = f"free-bot-{tag}", f"pro-bot-{tag}"
    store = await Store.connect(setup.database_url, pool_size=2, max_overflow=0)
    try:
        hosting = Hosting(store.engine)
        await _put(hosting, _document(free_bot, free_ws, "free"))
        await _put(hosting, _document(pro_bot, pro_ws, "pro"))
        await hosting.set_workspace(free_ws, plan="free")
        await hosting.set_workspace(pro_ws, plan="pro")
    finally:
        await store.close()
    free = [f"f{i}-{tag}" for i in range(12)]
    pro = [f"p{i}-{tag}" for i in range(4)]
    settings = setup.settings(agent_registry=True, agent_refresh_ms=100,
                              plan_model_turns_per_minute=f"free={PER_MINUTE}")
    waits = metrics.PLAN_MINUTE_WAITS.labels(plan="free")._value.get()
    async with setup.reader() as out, running_consumer(settings, None), \
            running_consumer(settings, None):
        await setup.produce([_msg(sid, "hi", free_bot) for sid in free]
                            + [_msg(sid, "hi", pro_bot) for sid in pro])
        await out.until(lambda v: all(_texts(v, s) for s in pro), within=20)
        await out.until(lambda v: all(_texts(v, s) for s in free), within=90)
        await out.settle(1.0)
    for sid in free:
        assert _texts(out.values, sid) == ["free"], sid
    for sid in pro:
        assert _texts(out.values, sid) == ["pro"], sid
    connection = await asyncpg.connect(plain_url(setup.database_url))
    try:
        rows = await connection.fetch(
            "SELECT workspace_id, minute, turns FROM workspace_model_minutes "
            "WHERE workspace_id = ANY($1::text[]) ORDER BY minute", [free_ws, pro_ws])
    finally:
        await connection.close()
    assert {r["workspace_id"] for r in rows} == {free_ws}  # the pro plan is not counted
    assert all(r["turns"] <= PER_MINUTE for r in rows), [dict(r) for r in rows]
    assert sum(r["turns"] for r in rows) >= len(free) and len(rows) >= 2
    assert metrics.PLAN_MINUTE_WAITS.labels(plan="free")._value.get() > waits
    assert await dead_letters(setup) == 0
