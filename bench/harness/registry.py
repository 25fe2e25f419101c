"""Agents in the hosting registry, for a consumer run with ``AGENT_REGISTRY=true``: one per
workspace, each turn one model call, a reply and a timer."""

from __future__ import annotations

from typing import Any

__all__ = ["registry_agent", "store_registry_agents"]


def registry_agent(workspace: str) -> dict[str, Any]:
    """One registry agent per workspace: one model call a turn, a reply and a timer."""
    return {
        "agent_id": f"agent-{workspace}",
        "workspace": workspace,
        "name": "Bancada",
        "flows": [{
            "id": "talk",
            "on": [{"message": []}],
            "steps": [
                {"id": "reply", "prompt": "Responda em uma frase."},
                {"id": "w", "wait": {"ms": 3_600_000}, "then": "end", "else": "reply"},
            ],
        }],
    }


async def store_registry_agents(url: str, workspaces: int, plans: dict[str, str]) -> None:
    """One active agent per workspace ``ws-0`` ... in the registry, with the plan ``plans``
    gives a workspace, for a consumer run with ``AGENT_REGISTRY=true``."""
    from engine.definition import definition_digest
    from store import Store
    from store.hosting import Hosting

    store = await Store.connect(url, pool_size=2, max_overflow=0)
    try:
        hosting = Hosting(store.engine)
        for w in range(workspaces):
            document = registry_agent(f"ws-{w}")
            await hosting.put_version(
                agent_id=document["agent_id"], workspace=document["workspace"],
                document=document, digest=definition_digest(document), activate=True,
            )
            plan = plans.get(f"ws-{w}")
            if plan is not None:
                await hosting.set_workspace(f"ws-{w}", plan=plan)
    finally:
        await store.close()
