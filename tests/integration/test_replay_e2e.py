"""Recording through the real consumer and PostgreSQL, then replaying from the turn log."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from consumer.cli import main
from engine.providers import RuleProvider
from examples.demo_agent import build_agent
from replay.golden import read_directory
from replay.report import report_text
from replay.session import replay_many
from replay.source import Selection, choose_sessions, read_conversations
from store import Store
from tests.integration.harness import SetupFactory, load_when, running_consumer
from tests.replay.support import demo, script, step

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


async def test_conversations_recorded_by_the_consumer_replay_from_the_database(
    service_setup: SetupFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ten conversations on the same flows go through the consumer at once; read back from
    the turn log they replay identical on the same agent, a reworded greeting departs at turn
    1 in every conversation that greets, and exported golden files replay with no database."""
    setup = await service_setup()
    run = uuid.uuid4().hex[:6]
    scripts = {f"e2e-{run}-{n}": script(n) for n in range(10)}
    records: list[dict[str, Any]] = []
    longest = max(len(s) for s in scripts.values())
    for position in range(longest):  # interleaved: every session's first input, then seconds
        for session_id, inputs in scripts.items():
            if position < len(inputs):
                records.append({"session_id": session_id, **inputs[position][1]})
    settings = setup.settings(model_recording="envelopes")
    async with running_consumer(settings, build_agent(RuleProvider())):
        await setup.produce(records)
        for session_id, inputs in scripts.items():
            turns = len(inputs)
            await load_when(setup.database_url, session_id,
                            lambda s, turns=turns: s.version >= turns, within=60)

    store = await Store.connect(setup.database_url, pool_size=2)
    try:
        chosen = await choose_sessions(store, Selection(sessions=tuple(scripts)))
        conversations = [c async for c in read_conversations(store, chosen)]
    finally:
        await store.close()
    assert [c.session_id for c in conversations] == sorted(scripts)
    assert all(t.calls is not None for c in conversations for t in c.turns)
    assert sum(len(t.calls or []) for c in conversations for t in c.turns) > 20

    same = await replay_many(demo(), conversations)
    assert same.counts()["identical"] == 10, report_text(same)
    assert same.unrecorded == 0

    def reword(flows: list[dict[str, Any]]) -> None:
        step(flows, "welcome", "hello")["say"] = "Hello! Ana here, at Spoke & Chain."

    changed = await replay_many(demo(reword), conversations)
    greeting = [r for r in changed.reports if r.status == "changed"]
    assert len(greeting) == 8  # the two opening-hours questions never greet
    assert {r.departure.turn for r in greeting if r.departure} == {1}

    # The command line (run off this event loop, as from a shell): export golden files from the
    # database, replay them without one.
    monkeypatch.setenv("DATABASE_URL", setup.database_url)
    golden = tmp_path / "golden"
    sessions = [a for s in sorted(scripts)[:4] for a in ("--session", s)]
    assert await asyncio.to_thread(main, ["replay", "export", "--out", str(golden), *sessions]) == 0
    assert len(read_directory(golden)) == 4
    monkeypatch.delenv("DATABASE_URL")
    capsys.readouterr()
    code = await asyncio.to_thread(
        main, ["replay", "--agent", "tests.replay.agents:same", "--from", str(golden)])
    assert code == 0, capsys.readouterr().out
    assert await asyncio.to_thread(
        main, ["replay", "--agent", "tests.replay.agents:reworded", "--from", str(golden)]) == 1
    out = capsys.readouterr().out
    assert "+ verbatim: Hello! Ana here, at Spoke & Chain." in out
