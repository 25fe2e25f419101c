"""Replaying conversations served from the registry: each turn against the agent version that
answered it (recorded by the real consumer in PostgreSQL), whatever is live when replaying."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from consumer.cli import main
from engine import ok
from engine.definition import definition_digest
from engine.packs import Pack
from store import Store
from store.hosting import Hosting
from tests.integration.harness import SetupFactory, load_when, running_consumer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


async def _note(ctx: Any) -> Any:
    return ok(data={"noted": True})


pack = Pack(name="notes", actions={"note": _note})
PACKS = "tests.integration.test_replay_registry:pack"


def _document(agent_id: str, workspace: str, greeting: str) -> dict[str, Any]:
    """Greets with ``greeting``, runs the pack's ``note`` action, and says it noted."""
    return {
        "agent_id": agent_id, "workspace": workspace, "name": "Bot", "packs": ["notes"],
        "lifecycle": {}, "fields": {"noted": {"type": "boolean"}},
        "flows": [{"id": "chat", "on": [{"message": []}], "steps": [
            {"id": "hi", "say": greeting},
            {"id": "note", "do": "note"},
            {"id": "done", "say": "noted"},
        ]}],
    }


def _msg(session_id: str, n: int, agent_id: str | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {"session_id": session_id, "message": f"hello {n}", "id": f"m{n}"}
    if agent_id is not None:
        record["agent_id"] = agent_id
    return record


async def test_replay_rebuilds_the_registry_version_each_turn_ran_with(
    service_setup: SetupFactory, store: Store, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """Two conversations answered by version 1 through the consumer; version 2 (another
    greeting) is activated and answers one more turn of the first. Replayed from the turn log
    with no --agent, every turn runs against the version that answered it: both identical. Against
    the live version (2) the turns version 1 answered depart; against version 1, the turn version
    2 answered does. Exported golden files keep the versions and replay the same way."""
    setup = await service_setup()
    tag = uuid.uuid4().hex[:8]
    bot, workspace = f"bot/{tag}", f"ws {tag}"
    mixed, old = f"mixed-{tag}", f"old-{tag}"
    hosting = Hosting(store.engine)
    for greeting, activate in (("hi from v1", True), ("hi from v2", False)):
        document = _document(bot, workspace, greeting)
        await hosting.put_version(agent_id=bot, workspace=workspace, document=document,
                                  digest=definition_digest(document), activate=activate)
    settings = setup.settings(agent_registry=True, packs=PACKS, agent_refresh_ms=100,
                              model_recording="envelopes")
    async with running_consumer(settings, None):
        await setup.produce([_msg(mixed, 1, bot), _msg(old, 1, bot), _msg(mixed, 2), _msg(old, 2)])
        for session_id in (mixed, old):
            await load_when(setup.database_url, session_id, lambda s: s.version >= 2, within=60)
        await hosting.activate(bot, 2)
        await setup.produce([_msg(mixed, 3)])
        await load_when(setup.database_url, mixed, lambda s: s.version >= 3, within=60)
    logged = await store.logged_turns([mixed, old])
    assert [(t.session_id, t.agent_id, t.agent_version) for t in logged] == [
        (mixed, bot, 1), (mixed, bot, 1), (mixed, bot, 2), (old, bot, 1), (old, bot, 1)
    ]
    assert logged[2].messages[0]["text"] == "hi from v2"

    monkeypatch.setenv("DATABASE_URL", setup.database_url)
    monkeypatch.setenv("PACKS", PACKS)
    monkeypatch.delenv("AGENT", raising=False)
    sessions = ["--session", mixed, "--session", old]

    async def replay(*args: str) -> tuple[int, str, dict[str, Any]]:
        report = tmp_path / f"{uuid.uuid4().hex}.json"
        code = await asyncio.to_thread(main, ["replay", *sessions, *args, "--json", str(report)])
        body = json.loads(report.read_text()) if report.exists() else {}
        return code, capsys.readouterr().out, body

    code, out, body = await replay()
    assert code == 0, out
    assert "2 identical, 0 changed" in out
    assert {c["session_id"]: c["agents"] for c in body["conversations"]} == {
        mixed: [f"{bot} v1", f"{bot} v2"], old: [f"{bot} v1"]}

    code, out, body = await replay("--agent", "registry", "--agent-version", "live")
    assert code == 1
    assert f"CHANGED: {old} departs at turn 1 of 2" in out
    assert f"CHANGED: {mixed} departs at turn 1 of 3" in out
    assert f"replayed against {bot} v2" in out and "+ verbatim: hi from v2" in out
    assert {c["session_id"]: c["agents"] for c in body["conversations"]} == {
        mixed: [f"{bot} v2"], old: [f"{bot} v2"]}

    code, out, body = await replay("--agent-version", "1")
    assert code == 1
    assert f"CHANGED: {mixed} departs at turn 3 of 3" in out and "+ verbatim: hi from v1" in out
    assert {c["session_id"]: c["status"] for c in body["conversations"]} == {
        mixed: "changed", old: "identical"}

    # Golden files carry each turn's agent and version; replayed from the registry, identical.
    golden = tmp_path / "golden"
    assert await asyncio.to_thread(main, ["replay", "export", "--out", str(golden), *sessions]) == 0
    turns = [t for f in sorted(golden.iterdir()) for t in json.loads(f.read_text())["turns"]]
    assert [(t["agent_id"], t["agent_version"]) for t in turns] == [(bot, 1), (bot, 1), (bot, 2),
                                                                    (bot, 1), (bot, 1)]
    code, out, _ = await replay("--agent", "registry", "--from", str(golden))
    assert code == 0 and "2 identical, 0 changed" in out, out

    # Without the pack the versions name, nothing is replayed against a half-built agent: each
    # conversation is skipped, saying why.
    monkeypatch.delenv("PACKS")
    code, out, body = await replay()
    assert f"skipped: {old}: agent {bot!r} version 1 does not build with the installed packs" \
        in out
    assert {c["status"] for c in body["conversations"]} == {"skipped"}
