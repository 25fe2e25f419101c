"""Registry agents' timers through the real scheduler: a wake names no agent, and the consumer
answers it with the agent its conversation is bound to, in that agent's workspace."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from consumer.scheduler.service import FiringOptions
from engine import ok
from engine.definition import definition_digest
from engine.packs import Pack
from store import Store
from store.hosting import Hosting
from tests.integration.harness import SetupFactory, running_consumer
from tests.integration.test_scheduler_e2e import running_scheduler

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def _mark(ctx: Any) -> Any:
    return ok(data={"nudged": True})


pack = Pack(name="nudges", actions={"mark": _mark})


def _document(agent_id: str, workspace: str) -> dict[str, Any]:
    """Greets, parks on a 1.5 s timer (a real one: a ``do`` follows), then nudges by name."""
    return {
        "agent_id": agent_id, "workspace": workspace, "name": "Bot", "packs": ["nudges"],
        "fields": {"nudged": {"type": "boolean"}},
        "flows": [{"id": "greet", "on": [{"message": []}], "steps": [
            {"id": "hello", "say": f"hello from {agent_id}"},
            {"id": "w", "wait": {"ms": 1500}, "then": "mark", "else": "end"},
            {"id": "mark", "do": "mark"},
            {"id": "nudge", "say": f"still there? ({agent_id})"},
        ]}],
    }


async def test_a_wake_is_answered_by_the_conversations_own_agent(
    store: Store, service_setup: SetupFactory
) -> None:
    setup = await service_setup()
    tag = uuid.uuid4().hex[:6]
    hosting = Hosting(store.engine)
    agents = {f"s{i}-{tag}": (f"ws{i % 2}-{tag}", f"bot{i % 2}-{tag}") for i in range(4)}
    for workspace, agent_id in set(agents.values()):
        document = _document(agent_id, workspace)
        await hosting.put_version(agent_id=agent_id, workspace=workspace, document=document,
                                  digest=definition_digest(document), activate=True)
    settings = setup.settings(
        agent_registry=True, packs="tests.integration.test_registry_scheduler:pack"
    )
    async with (
        running_scheduler(store, setup, group_id=f"{settings.group_id}-scheduler",
                          options=FiringOptions(max_idle=1.0)),
        running_consumer(settings, None),
    ):
        await setup.produce([
            {"session_id": sid, "message": "hi", "id": "m1", "agent_id": agent_id}
            for sid, (_, agent_id) in agents.items()
        ])
        async with setup.reader() as replies:
            values = await replies.until(lambda v: len(v) >= 2 * len(agents), within=60)

    for sid, (_, agent_id) in agents.items():
        assert [v["text"] for v in values if v["session_id"] == sid] == [
            f"hello from {agent_id}", f"still there? ({agent_id})"
        ]
    logged = await store.logged_turns(sorted(agents))
    wakes = [t for t in logged if "wake" in t.input]
    assert len(wakes) == len(agents)
    for turn in wakes:
        assert (turn.agent_id, turn.agent_version) == (agents[turn.session_id][1], 1)
