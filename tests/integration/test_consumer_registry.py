"""Many workspaces' agents in one consumer, from the registry in PostgreSQL: routing by
``agent_id`` and by the conversation's binding, a newly activated version answering the next
turn without a restart, refusals that never cross workspaces, and one ledger row per billed
turn."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest

from engine.definition import definition_digest
from store import Store
from store.hosting import Hosting
from tests.integration.harness import DLQ, SetupFactory, running_consumer
from tests.integration.test_consumer_dlq import read_dlq

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _document(agent_id: str, workspace: str, text: str) -> dict[str, Any]:
    """An agent that says ``text`` to any message: no model call, one credit per reply."""
    return {
        "agent_id": agent_id, "workspace": workspace, "name": "Bot", "lifecycle": {},
        "flows": [{"id": "chat", "on": [{"message": []}],
                   "steps": [{"id": "hi", "say": text}]}],
    }


REFRESH_MS = 100


async def _after_a_poll() -> None:
    """Wait out the consumer's registry poll interval (several times over): a new version
    answers the next turn *after a poll*, and on a fast broker (Apache Kafka) the next input
    can otherwise be taken within the same interval as the activation, from the old copy."""
    await asyncio.sleep(5 * REFRESH_MS / 1000)


async def _put(hosting: Hosting, document: dict[str, Any], *, activate: bool = True) -> int:
    result = await hosting.put_version(
        agent_id=document["agent_id"], workspace=document["workspace"], document=document,
        digest=definition_digest(document), activate=activate,
    )
    return result.version


def _msg(session_id: str, text: str, agent_id: str | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {"session_id": session_id, "message": text,
                              "id": f"m-{uuid.uuid4().hex[:10]}"}
    if agent_id is not None:
        record["agent_id"] = agent_id
    return record


def _texts(values: list[dict[str, Any]], session_id: str) -> list[str]:
    return [v["text"] for v in values if v["session_id"] == session_id]


async def test_registry_agents_route_switch_versions_and_never_cross_workspaces(
    service_setup: SetupFactory,
) -> None:
    setup = await service_setup(partitions=2)
    tag = uuid.uuid4().hex[:8]
    # Two workspaces whose ids, and agents' ids, differ only by case.
    ws_a, ws_b = f"Shop {tag}", f"shop {tag}"
    bot_a, bot_b = f"Bot/{tag}", f"bot/{tag}"
    store = await Store.connect(setup.database_url, pool_size=2, max_overflow=0)
    hosting = Hosting(store.engine)
    try:
        await _put(hosting, _document(bot_a, ws_a, "A v1"))
        await _put(hosting, _document(bot_b, ws_b, "B v1"))
        await _put(hosting, _document(f"helper/{tag}", ws_a, "A helper"))
        s1, s2, s3, s4 = (f"{name}-{tag}" for name in ("s1", "s2", "s3", "s4"))
        settings = setup.settings(agent_registry=True, agent_refresh_ms=REFRESH_MS)
        async with running_consumer(settings, None):
            await setup.produce([
                _msg(s1, "hello", bot_a), _msg(s2, "hello", bot_b),
                _msg(s1, "again"),  # bound: bot_a answers
                _msg(s2, "hijack", bot_a),  # bot_a is another workspace's: refused
                _msg(s2, "again"),
                _msg(s3, "who?", f"nobody/{tag}"),  # unknown agent: refused
                _msg(s4, "no agent"),  # no agent named, none bound, no AGENT: refused
                _msg(s1, "helper please", f"helper/{tag}"),  # same workspace: allowed
            ])
            async with setup.reader() as replies:
                values = await replies.until(
                    lambda v: len(_texts(v, s1)) >= 3 and len(_texts(v, s2)) >= 2
                )
            dead = await read_dlq(setup.bootstrap, setup.topics[DLQ], 3)
            assert _texts(values, s1) == ["A v1", "A v1", "A helper"]
            assert _texts(values, s2) == ["B v1", "B v1"]
            assert [v["meta"]["agent_id"] for v in values if v["session_id"] == s1] == [
                bot_a, bot_a, f"helper/{tag}"
            ]
            reasons = {dict(r.headers)["error"] for r in dead}  # type: ignore[attr-defined]
            assert reasons == {b"workspace-mismatch", b"unknown-agent", b"no-agent"}

            # A new version, activated while the consumer runs: the next turn uses it.
            version = await _put(hosting, _document(bot_b, ws_b, "B v2"))
            assert version == 2
            await _after_a_poll()
            await setup.produce([_msg(s2, "and now?")])
            async with setup.reader() as replies:
                values = await replies.until(lambda v: len(_texts(v, s2)) >= 3)
            assert _texts(values, s2)[-1] == "B v2"
            await hosting.activate(bot_b, 1)  # roll back
            await _after_a_poll()
            await setup.produce([_msg(s2, "and now?")])
            async with setup.reader() as replies:
                values = await replies.until(lambda v: len(_texts(v, s2)) >= 4)
            assert _texts(values, s2)[-1] == "B v1"

        connection = await asyncpg.connect(setup.database_url)
        try:
            turns = await connection.fetch(
                "SELECT session_id, agent_id, agent_version FROM turns "
                "WHERE session_id = ANY($1) ORDER BY id", [s1, s2]
            )
            ledger = await connection.fetch(
                "SELECT workspace_id, session_id, agent_id, agent_version, credits "
                "FROM credit_ledger WHERE session_id = ANY($1) ORDER BY id", [s1, s2]
            )
        finally:
            await connection.close()
        assert [(r["agent_id"], r["agent_version"]) for r in turns if r["session_id"] == s2] == [
            (bot_b, 1), (bot_b, 1), (bot_b, 2), (bot_b, 1)
        ]
        assert {r["agent_id"] for r in turns if r["session_id"] == s1} == {bot_a, f"helper/{tag}"}
        # One row per billed turn, in its workspace, never the other's.
        assert len(ledger) == len(turns) == 7
        assert {(r["session_id"], r["workspace_id"]) for r in ledger} == {(s1, ws_a), (s2, ws_b)}
        totals = {t.workspace: t.credits for t in await hosting.daily_credits()
                  if t.workspace in (ws_a, ws_b)}
        assert totals == {ws_a: 3, ws_b: 4}
    finally:
        await store.close()
