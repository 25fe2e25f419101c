"""Registry agents and the credit ledger under a hard exit: a consumer serving two workspaces'
agents dies right after a save (nothing published, offset not committed, the turn after it
loaded and lost); a second consumer takes over and replays what the first had not committed.
Every input is billed exactly once, in its own workspace, by the agent and version the turn
log names for it. (The other crash points are covered for every turn by
``test_crash_points``; a charge is written by the save statement itself.)"""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from consumer.turns.crash import CRASH_EXIT_CODE
from engine.definition import definition_digest
from store import Store
from store.hosting import Hosting
from tests.faults.process import ConsumerProcess, SetupFactory, consumers

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(120)]

SESSIONS = 4
INPUTS_PER_SESSION = 5


async def _put_agents(database_url: str, tag: str) -> list[tuple[str, str]]:
    agents = [(f"ws-a-{tag}", f"bot-a-{tag}"), (f"ws-b-{tag}", f"bot-b-{tag}")]
    store = await Store.connect(database_url, pool_size=1, max_overflow=0)
    try:
        hosting = Hosting(store.engine)
        for workspace, agent_id in agents:
            document = {
                "agent_id": agent_id, "workspace": workspace, "name": "Bot", "lifecycle": {},
                "flows": [{"id": "chat", "on": [{"message": []}],
                           "steps": [{"id": "hi", "say": f"{agent_id} here"}]}],
            }
            await hosting.put_version(
                agent_id=agent_id, workspace=workspace, document=document,
                digest=definition_digest(document), activate=True,
            )
    finally:
        await store.close()
    return agents


async def test_a_hard_exit_never_loses_or_doubles_a_charge(fault_setup: SetupFactory) -> None:
    point = "after_save"
    setup = await fault_setup()
    tag = uuid.uuid4().hex[:6]
    agents = await _put_agents(setup.database_url, tag)
    sessions = {f"ledger-{point}-{i}-{tag}": agents[i % 2] for i in range(SESSIONS)}
    await setup.produce([
        {"session_id": sid, "message": f"m{j}", "id": f"wamid.{uuid.uuid4().hex[:12]}",
         **({"agent_id": agent_id} if j == 0 else {})}
        for j in range(INPUTS_PER_SESSION) for sid, (_, agent_id) in sessions.items()
    ])
    registry = {"AGENT": "", "AGENT_REGISTRY": "true"}

    async with consumers() as started:
        crashing = ConsumerProcess(
            setup.env(TURNFLOW_CRASH_AT=f"{point}:6", **registry), "crashing"
        )
        started.append(crashing)
        await crashing.start(assigned=False)
        assert await crashing.wait(within=60) == CRASH_EXIT_CODE, crashing.raw[-20:]
        survivor = ConsumerProcess(setup.env(**registry), "restarted")
        started.append(survivor)
        await survivor.start()
        ledger = setup.ledger()
        await ledger.read(
            until=lambda led: all(
                len(led.texts(sid)) >= INPUTS_PER_SESSION for sid in sessions
            ),
            within=60,
        )
        assert await survivor.stop() == 0

    connection = await asyncpg.connect(setup.database_url)
    try:
        turns = await connection.fetch(
            "SELECT id, session_id, agent_id, agent_version, input_id FROM turns "
            "WHERE session_id = ANY($1)", list(sessions)
        )
        charges = await connection.fetch(
            "SELECT turn_id, workspace_id, session_id, agent_id, agent_version, charge_key, "
            "credits FROM credit_ledger WHERE session_id = ANY($1)", list(sessions)
        )
    finally:
        await connection.close()
    assert len(turns) == SESSIONS * INPUTS_PER_SESSION
    assert len(charges) == len(turns)
    by_turn = {c["turn_id"]: c for c in charges}
    for turn in turns:
        charge = by_turn[turn["id"]]
        workspace, agent_id = sessions[turn["session_id"]]
        assert (charge["workspace_id"], charge["agent_id"], charge["agent_version"]) == (
            workspace, agent_id, 1
        )
        assert (turn["agent_id"], turn["agent_version"]) == (agent_id, 1)
        assert charge["charge_key"] == f"input:{turn['input_id']}" and charge["credits"] == 1
    for sid, (_, agent_id) in sessions.items():
        assert ledger.texts(sid) == [f"{agent_id} here"] * INPUTS_PER_SESSION
