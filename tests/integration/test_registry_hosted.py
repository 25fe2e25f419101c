"""Every registry agent is hosted, on the real consumer: ``examples/agents/demo.json`` (no
lifecycle section) is gated while its workspace's agents are off (no reply, no ledger row) and
billed to the ledger when they are on."""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from pathlib import Path

import asyncpg
import pytest

from engine.definition import definition_digest
from store import Store
from store.hosting import Hosting
from tests.integration.harness import SetupFactory, running_consumer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

DEMO = json.loads((Path(__file__).resolve().parents[2] / "examples/agents/demo.json").read_text())


async def test_the_demo_agent_is_gated_and_billed(
    store: Store, service_setup: SetupFactory
) -> None:
    """Three conversations while the plan is off get nothing and bill nothing (turns logged as
    gated); three after it is on are answered and each writes its credits to the ledger."""
    setup = await service_setup(partitions=2)
    tag = uuid.uuid4().hex[:6]
    agent_id, workspace = f"demo-{tag}", f"acme-{tag}"
    document = copy.deepcopy(DEMO) | {"agent_id": agent_id, "workspace": workspace}
    hosting = Hosting(store.engine)
    await hosting.put_version(agent_id=agent_id, workspace=workspace, document=document,
                              digest=definition_digest(document), activate=True)
    await hosting.set_workspace(workspace, agents_enabled=False)
    off = [f"off{i}-{tag}" for i in range(3)]
    on = [f"on{i}-{tag}" for i in range(3)]
    settings = setup.settings(agent_registry=True, agent_refresh_ms=100,
                              packs="examples.demo_pack:pack")
    async with running_consumer(settings, None):
        await setup.produce([{"session_id": s, "message": "I want to book brakes", "id": "m1",
                              "agent_id": agent_id} for s in off])
        for _ in range(200):  # until all three turns are logged
            if len({t.session_id for t in await store.logged_turns(off)}) == 3:
                break
            await asyncio.sleep(0.1)
        await hosting.set_workspace(workspace, agents_enabled=True)
        await asyncio.sleep(0.5)
        await setup.produce([{"session_id": s, "message": "I want to book brakes", "id": "m1",
                              "agent_id": agent_id} for s in on])
        async with setup.reader() as replies:
            values = await replies.until(
                lambda v: all(any(x["session_id"] == s for x in v) for s in on), within=60
            )
    assert not [v for v in values if v["session_id"] in off]
    gated = await store.logged_turns(off)
    assert len(gated) == 3 and all("gated" in str(t.outcomes) for t in gated)
    connection = await asyncpg.connect(setup.database_url)
    try:
        ledger = await connection.fetch(
            "SELECT session_id, workspace_id, credits FROM credit_ledger "
            "WHERE session_id = ANY($1)", off + on
        )
    finally:
        await connection.close()
    assert sorted(r["session_id"] for r in ledger) == sorted(on)
    assert all(r["workspace_id"] == workspace and r["credits"] > 0 for r in ledger)
