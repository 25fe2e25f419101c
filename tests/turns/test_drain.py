"""The drain view: ``agents versions AGENT`` counts per version the conversations still pinned
to it and where their runs wait, from the saved sessions, never another agent's; ``agents
activate`` says what stays on other versions."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from sqlalchemy import text

from consumer import cli
from store import Store
from store.drain import drain
from store.hosting import Hosting
from tests.consumer.test_pinning import Conversation, _booking, _put, _router


async def _save(store: Store, conversations: list[Conversation]) -> None:
    async with store.engine.begin() as connection:
        for conversation in conversations:
            await connection.execute(
                text("INSERT INTO sessions (id, version, state) "
                     "VALUES (:id, 1, CAST(:state AS jsonb))"),
                {"id": conversation.session_id, "state": json.dumps(conversation.state)},
            )


async def _cli(argv: list[str]) -> int:
    """The CLI in a thread of its own: it runs its own event loop."""
    return await asyncio.to_thread(cli.main, argv)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, database_url: str) -> None:
    monkeypatch.setenv("DATABASE_URL", database_url)


async def test_versions_show_pinned_conversations_and_where_they_wait(
    store: Store, env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Four conversations asking and two on a timer under version 1, one asking under version
    2, one finished, and another agent's conversation: the view counts 6 on version 1 (by
    step) and 1 on version 2; activating version 2 says version 1 keeps 6."""
    hosting = Hosting(store.engine)
    tag = uuid.uuid4().hex[:6]
    agent_id, other_id = f"drain-{tag}", f"other-{tag}"
    await _put(hosting, _booking(agent_id, "v1", "what"))
    await _put(hosting, _booking(other_id, "o1", "what"))
    router = _router(hosting)
    asking = [Conversation(router, agent_id) for _ in range(4)]
    timers = [Conversation(router, agent_id) for _ in range(2)]
    done, other = Conversation(router, agent_id), Conversation(router, other_id)
    for conversation in [*asking, other]:
        await conversation.say("I want to book")
    for conversation in timers:
        await conversation.say("please call me")
    await done.say("book it for monday")
    await _put(hosting, _booking(agent_id, "v2", "when", timer=False))
    await hosting.activate(agent_id, 1)
    later = Conversation(router, agent_id)
    await hosting.activate(agent_id, 2)
    await later.say("I want to book")
    await _save(store, [*asking, *timers, done, other, later])

    found = await drain(store.engine, agent_id)
    assert [(v.version, v.conversations) for v in found.versions] == [(1, 6), (2, 1)]
    v1 = found.pinned(1)
    assert v1 is not None
    assert {(w.flow_id, w.step_id, w.status, w.runs) for w in v1.waits} >= {
        ("booking", "what", "asking", 4)
    }
    assert sum(w.runs for w in v1.waits if w.flow_id == "callback") == 2

    assert await _cli(["agents", "versions", agent_id]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "version\tlive\tconversations\twaiting"
    assert lines[1].startswith("1\t-\t6\tbooking/what asking 4")
    assert lines[2].startswith("2\tlive\t1\tbooking/when asking 1")
    assert await _cli(["agents", "activate", agent_id, "2"]) == 0
    out = capsys.readouterr().out
    assert "version 1 keeps 6 conversations until their runs end: booking/what asking 4" in out
    assert await _cli(["agents", "versions", f"nobody-{tag}"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


async def test_damaged_sessions_are_skipped_not_an_error(store: Store) -> None:
    """Bindings and runs of unexpected shapes (text versions, huge numbers, runs not a list)
    are skipped by the view."""
    agent_id = f"odd-{uuid.uuid4().hex[:6]}"
    states = [
        {"metadata": {"agent": {"agent_id": agent_id, "version": "1"}}, "runs": [{}]},
        {"metadata": {"agent": {"agent_id": agent_id, "version": 1e30}}, "runs": [{}]},
        {"metadata": {"agent": {"agent_id": agent_id, "version": 1}}, "runs": {"a": 1}},
        {"metadata": {"agent": {"agent_id": agent_id, "version": 1}}, "runs": [3, {}]},
    ]
    async with store.engine.begin() as connection:
        for i, state in enumerate(states):
            await connection.execute(
                text("INSERT INTO sessions (id, version, state) "
                     "VALUES (:id, 1, CAST(:state AS jsonb))"),
                {"id": f"{agent_id}-{i}", "state": json.dumps(state)},
            )
    found = await drain(store.engine, agent_id)
    assert [(v.version, v.conversations) for v in found.versions] == [(1, 1)]
    assert [(w.flow_id, w.runs) for w in found.versions[0].waits] == [("?", 1)]
