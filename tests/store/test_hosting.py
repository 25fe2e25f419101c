"""The registry, the workspaces' web-search quota and the credit ledger, on PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import asyncpg
import pytest

from store import DuplicateInput, SourceRecord, Store
from store.hosting import Hosting, RegistryError
from tests.store.builders import save_request

# Ids an attacker would pick: look-alikes, case, spaces, quotes, SQL, unicode, very long, and
# é composed and decomposed (two ids).
ODD_IDS = ["acme", "ACME", "acme ", "\uff41\uff43\uff4d\uff45", "ac'me",
           "a;DROP TABLE agents;--", "🤖/../x", "x" * 256, "\u00e9", "e\u0301"]


async def _ledger(database_url: str) -> list[Any]:
    connection = await asyncpg.connect(database_url)
    try:
        return list(await connection.fetch(
            "SELECT workspace_id, agent_id, agent_version, session_id, charge_key, credits "
            "FROM credit_ledger ORDER BY id"
        ))
    finally:
        await connection.close()


async def test_put_stores_a_version_per_change_and_activate_picks_the_live_one(
    store: Store,
) -> None:
    hosting = Hosting(store.engine)
    first = await hosting.put_version(
        agent_id="bot", workspace="acme", document={"name": "A"}, digest="d1"
    )
    assert (first.version, first.created, first.live_version) == (1, True, None)
    again = await hosting.put_version(
        agent_id="bot", workspace="acme", document={"name": "A"}, digest="d1", activate=True
    )
    assert (again.version, again.created, again.live_version) == (1, False, 1)
    second = await hosting.put_version(
        agent_id="bot", workspace="acme", document={"name": "B"}, digest="d2"
    )
    assert (second.version, second.live_version) == (2, 1)
    assert (await hosting.version("bot")).document == {"name": "A"}
    await hosting.activate("bot", 2)
    live = await hosting.version("bot")
    assert (live.version, live.document, live.live) == (2, {"name": "B"}, True)
    await hosting.activate("bot", 1)  # roll back
    assert (await hosting.version("bot")).version == 1
    with pytest.raises(RegistryError, match="no version 3"):
        await hosting.activate("bot", 3)
    [row] = await hosting.list_agents()
    assert (row.agent_id, row.workspace, row.live_version, row.latest_version, row.versions) == (
        "bot", "acme", 1, 2, 2
    )


async def test_an_agent_never_moves_to_another_workspace(store: Store) -> None:
    hosting = Hosting(store.engine)
    await hosting.put_version(agent_id="bot", workspace="acme", document={}, digest="d")
    with pytest.raises(RegistryError, match="belongs to workspace 'acme'"):
        await hosting.put_version(agent_id="bot", workspace="evil", document={}, digest="e")
    assert (await hosting.version("bot", 1)).workspace == "acme"
    assert [r.workspace for r in await hosting.list_agents()] == ["acme"]


async def test_ids_of_any_shape_are_kept_and_compared_exactly(store: Store) -> None:
    hosting = Hosting(store.engine)
    for i, agent_id in enumerate(ODD_IDS):
        await hosting.put_version(
            agent_id=agent_id, workspace=agent_id, document={"i": i}, digest=str(i),
            activate=True,
        )
    live = await hosting.live(ODD_IDS)
    assert len(live) == len(set(ODD_IDS)) == len(ODD_IDS)
    for i, agent_id in enumerate(ODD_IDS):
        assert live[agent_id].workspace == agent_id
        assert (await hosting.version(agent_id)).document == {"i": i}
    assert {r.workspace for r in await hosting.list_agents("ACME")} == {"ACME"}


async def test_the_daily_web_search_limit_holds_under_concurrency_per_workspace(
    store: Store,
) -> None:
    hosting = Hosting(store.engine)
    await hosting.set_workspace("small", web_searches_per_day=5, set_web_searches_per_day=True)
    await hosting.set_workspace("none", web_searches_per_day=0, set_web_searches_per_day=True)
    await hosting.set_workspace("free")
    taken = await asyncio.gather(*(hosting.take_web_search("small") for _ in range(30)))
    assert sum(taken) == 5
    assert await hosting.web_searches_today("small") == 5
    assert not await hosting.take_web_search("none")
    assert all(await asyncio.gather(*(hosting.take_web_search("free") for _ in range(12))))
    assert await hosting.web_searches_today("free") == 12
    # Raising the limit later lets the workspace go on; another workspace never counted.
    await hosting.set_workspace("small", web_searches_per_day=6, set_web_searches_per_day=True)
    assert await hosting.take_web_search("small")
    assert not await hosting.take_web_search("small")
    assert await hosting.web_searches_today("SMALL") == 0


def _billed(session: str, version: int, credits: int | None, **turn: Any) -> Any:
    request = save_request(session, version, **turn)
    billed = dataclasses.replace(
        request.turn, agent_id="bot", agent_version=3, workspace="acme", credits=credits
    )
    return dataclasses.replace(request, turn=billed)


async def test_a_billed_turn_writes_its_charge_in_its_save_once(
    store: Store, database_url: str
) -> None:
    source = SourceRecord("inbound.turns", 0, 7)
    await store.save_turn(_billed("s1", 0, 4, source=source, input_id="m1"))
    await store.save_turn(_billed("s1", 1, 0, input_id="m2"))  # a free turn: no row
    await store.save_turn(_billed("s1", 2, None, message=None))  # a wake: no row
    with pytest.raises(DuplicateInput):  # the same input retried at another offset
        await store.save_turn(_billed("s1", 3, 4, source=SourceRecord("t", 0, 9), input_id="m1"))
    rows = await _ledger(database_url)
    assert [tuple(r) for r in rows] == [("acme", "bot", 3, "s1", "input:m1", 4)]
    hosting = Hosting(store.engine)
    [total] = await hosting.daily_credits()
    assert (total.workspace, total.credits, total.turns) == ("acme", 4, 1)
    assert await hosting.daily_credits(workspace="ACME") == []


async def test_a_group_save_bills_each_turn_once(store: Store, database_url: str) -> None:
    requests = [
        _billed(f"g{i}", 0, i, source=SourceRecord("inbound.turns", 1, i)) for i in range(4)
    ]
    results = await store.save_turns(requests)
    assert all(not isinstance(r, Exception) for r in results)
    rows = await _ledger(database_url)
    assert sorted((r["session_id"], r["credits"], r["charge_key"]) for r in rows) == [
        (f"g{i}", i, f"source:inbound.turns:1:{i}") for i in range(1, 4)
    ]
    # The same records again (a replay): every save is refused, nothing is billed again.
    again = await store.save_turns(
        [_billed(f"g{i}", 1, i, source=SourceRecord("inbound.turns", 1, i)) for i in range(4)]
    )
    assert all(isinstance(r, Exception) for r in again)
    assert len(await _ledger(database_url)) == 3
    connection = await asyncpg.connect(database_url)
    try:
        logged = await connection.fetch(
            "SELECT DISTINCT agent_id, agent_version FROM turns WHERE session_id LIKE 'g%'"
        )
    finally:
        await connection.close()
    assert [tuple(r) for r in logged] == [("bot", 3)]


async def test_the_turn_log_read_back_names_the_agent_and_version(store: Store) -> None:
    await store.save_turn(_billed("r1", 0, 2, input_id="m1"))
    await store.save_turn(save_request("r1", 1, input_id="m2"))  # an AGENT-less record
    first, second = await store.logged_turns(["r1"])
    assert (first.agent_id, first.agent_version) == ("bot", 3)
    assert (second.agent_id, second.agent_version) == (None, None)


async def test_one_poll_gives_the_time_and_what_changed_since(store: Store) -> None:
    """The routers' poll, one statement: with no time to ask from, only the database's time;
    from a time, every agent and workspace changed since, whole (canary and run map too)."""
    hosting = Hosting(store.engine)
    now, agents, plans = await hosting.changes_since(None)
    assert (agents, plans) == ([], [])
    await hosting.put_version(agent_id="polled", workspace="polled-ws", document={"name": "A"},
                              digest="p1", activate=True)
    await hosting.put_version(agent_id="polled", workspace="polled-ws", document={"name": "B"},
                              digest="p2")
    await hosting.set_canary("polled", 2, 10)
    await hosting.set_workspace("polled-ws", plan="pro", agents_enabled=False)
    later, agents, plans = await hosting.changes_since(now)
    assert later >= now
    (agent,) = [a for a in agents if a.agent_id == "polled"]
    assert (agent.workspace, agent.live_version, agent.canary_version, agent.canary_percent) == (
        "polled-ws", 1, 2, 10)
    (plan,) = [p for p in plans if p.workspace == "polled-ws"]
    assert (plan.plan, plan.agents_enabled) == ("pro", False)
    assert isinstance(plan.web_searches_per_day, int | None)
