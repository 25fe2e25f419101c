"""Every registry agent is a hosted agent: ``examples/agents/demo.json`` (no lifecycle section)
is plan-checked (its turns gated, no model call, nothing billed, while its workspace's agents
are off) and billed by the lifecycle's rules when on; a silence follow-up wake is gated too,
while a wait's timer continues its run."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

from consumer.hosting.packs import load_packs
from consumer.hosting.routing import RegistryRouter
from consumer.turns.parser import ParsedInput
from engine.definition import definition_digest
from engine.providers import RuleProvider
from store import Store
from store.hosting import Hosting

DEMO = json.loads((Path(__file__).resolve().parents[2] / "examples/agents/demo.json").read_text())


class CountingProvider(RuleProvider):
    """The rule provider, counting its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    async def generate(self, request: Any) -> Any:
        self.count += 1
        return await super().generate(request)


async def _setup(store: Store) -> tuple[Hosting, RegistryRouter, CountingProvider, str, str]:
    hosting = Hosting(store.engine)
    tag = uuid.uuid4().hex[:6]
    agent_id, workspace = f"demo-{tag}", f"acme-{tag}"
    document = copy.deepcopy(DEMO) | {"agent_id": agent_id, "workspace": workspace}
    assert "lifecycle" not in document
    await hosting.put_version(agent_id=agent_id, workspace=workspace, document=document,
                              digest=definition_digest(document), activate=True)
    provider = CountingProvider()
    router = RegistryRouter(hosting, load_packs("examples.demo_pack:pack"), provider=provider,
                            refresh_s=0)
    return hosting, router, provider, agent_id, workspace


async def _turn(router: RegistryRouter, agent_id: str, session: str, request: dict[str, Any],
                state: dict[str, Any] | None) -> Any:
    kind = "wake" if "wake" in request else "message"
    parsed = ParsedInput(session, kind, {"session_id": session, **request},
                         input_id=str(request.get("id", "w")), agent_id=agent_id)
    route = await router.route(parsed, state)
    full = {"session_id": session, **request}
    if state is not None:
        full["session"] = state
    return await route.agent.turn(full)


async def test_a_registry_agent_without_lifecycle_is_gated_and_billed(store: Store) -> None:
    """Plan off: the demo's turn calls no model, bills nothing, outcome gated; plan on: it
    answers and states its credits, for several conversations side by side."""
    hosting, router, provider, agent_id, workspace = await _setup(store)
    await hosting.set_workspace(workspace, agents_enabled=False)
    for n in range(3):
        result = await _turn(router, agent_id, f"off-{n}",
                             {"message": "I want to book brakes", "id": "m1"}, None)
        assert result.turn_outcome == "gated" and result.credits == 0
        assert result.messages == []
    assert provider.count == 0
    await hosting.set_workspace(workspace, agents_enabled=True)
    for n in range(3):
        result = await _turn(router, agent_id, f"on-{n}",
                             {"message": "I want to book brakes on friday", "id": "m1"}, None)
        assert result.turn_outcome == "answered" and result.credits > 0
        assert result.messages
    assert provider.count > 0


async def test_a_silence_follow_up_is_gated_while_the_plan_is_off(store: Store) -> None:
    """The demo's silence nudge, woken after its workspace's agents were turned off, sends
    nothing and is outcome gated; with the plan on it nudges."""
    hosting, router, _provider, agent_id, workspace = await _setup(store)
    first = await _turn(router, agent_id, "quiet", {"message": "hello", "id": "m1"}, None)
    silence = [e.key for e in first.schedule if "silence" in e.key]
    assert silence, first.schedule
    state = first.session.model_dump(mode="json")
    await hosting.set_workspace(workspace, agents_enabled=False)
    gated = await _turn(router, agent_id, "quiet", {"wake": silence[0]}, state)
    assert gated.messages == [] and gated.turn_outcome == "gated" and gated.credits == 0
    await hosting.set_workspace(workspace, agents_enabled=True)
    nudged = await _turn(router, agent_id, "quiet", {"wake": silence[0]}, state)
    assert [m.text for m in nudged.messages] == [
        "Still there? Just reply whenever you're ready."
    ]
