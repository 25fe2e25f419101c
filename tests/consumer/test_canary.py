"""Canary ramps: ``--percent N`` sends about N% of new conversations to a version, chosen by
session id the same way on every consumer; conversations keep their side and their pinned runs;
100 promotes, activating the old version rolls back; turns count by version role."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer import cli, metrics
from consumer.hosting.canary import bucket, choose_version
from consumer.turns.parser import ParsedInput
from store import Store
from store.hosting import Hosting
from tests.consumer.test_pinning import Conversation, _booking, _put, _router


def _parsed(session: str, agent_id: str) -> ParsedInput:
    return ParsedInput(session, "message", {"session_id": session, "message": "hi"},
                       input_id="m", agent_id=agent_id)


async def test_a_ramp_splits_1000_new_conversations_stably_across_two_consumers(
    store: Store,
) -> None:
    """At 20% and then 50%: within 4 points of N over 1,000 new conversations, each one
    routed identically by two consumers; raising N only moves conversations to the canary."""
    hosting = Hosting(store.engine)
    agent_id = f"ramp-{uuid.uuid4().hex[:6]}"
    await _put(hosting, _booking(agent_id, "v1", "what"))
    await _put(hosting, _booking(agent_id, "v2", "when"))
    await hosting.activate(agent_id, 1)
    sessions = [f"wa:55119{n:07d}" for n in range(1000)]
    sides: dict[int, set[str]] = {}
    for percent in (20, 50):
        await hosting.set_canary(agent_id, 2, percent)
        one, two = _router(hosting), _router(hosting)
        chosen = []
        for session in sessions:
            a = await one.route(_parsed(session, agent_id), None)
            b = await two.route(_parsed(session, agent_id), None)
            assert (a.version, a.role) == (b.version, b.role)
            chosen.append(a)
        canary = {s for s, r in zip(sessions, chosen, strict=True) if r.role == "canary"}
        assert all(r.version == 2 for r in chosen if r.role == "canary")
        assert all(r.version == 1 and r.role == "live" for r in chosen if r.role != "canary")
        assert abs(len(canary) - 10 * percent) <= 40, len(canary)
        sides[percent] = canary
    assert sides[20] <= sides[50]


async def test_promote_and_roll_back_and_pinned_runs_keep_their_side(
    store: Store, database_url: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A conversation that started on the canary finishes on it after a roll-back; 100
    promotes; the CLI refuses a bad percent in one line; turns count by role."""
    monkeypatch.setenv("DATABASE_URL", database_url)
    hosting = Hosting(store.engine)
    agent_id = f"canary-{uuid.uuid4().hex[:6]}"
    await _put(hosting, _booking(agent_id, "v1", "what"))
    await _put(hosting, _booking(agent_id, "v2", "when"))
    await hosting.activate(agent_id, 1)
    assert await asyncio.to_thread(cli.main, ["agents", "activate", agent_id, "2",
                                              "--percent", "50"]) == 0
    assert "50% of new conversations" in capsys.readouterr().out
    router = _router(hosting)
    conversations = [Conversation(router, agent_id) for _ in range(20)]
    before = metrics.AGENT_VERSION_ROUTES.labels("canary")._value.get()
    for conversation in conversations:
        await conversation.say("I want to book")
    on_canary = [c for c in conversations if c.versions == [2]]
    assert on_canary and len(on_canary) < 20
    assert metrics.AGENT_VERSION_ROUTES.labels("canary")._value.get() - before == len(on_canary)
    await hosting.activate(agent_id, 1)  # roll back: the canary is cleared
    assert (await hosting.live([agent_id]))[agent_id].canary_version is None
    for conversation in on_canary:  # their runs started on 2: they finish on 2
        assert (await conversation.say("friday"))[-1] == "v2: booked friday"
    fresh = Conversation(router, agent_id)
    await fresh.say("I want to book")
    assert fresh.versions == [1]
    assert await asyncio.to_thread(cli.main, ["agents", "activate", agent_id, "2",
                                              "--percent", "101"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    for bad in ("0", "x"):  # refused by argparse: exit 2 before anything runs
        with pytest.raises(SystemExit) as exited:
            cli.main(["agents", "activate", agent_id, "2", "--percent", bad])
        assert exited.value.code == 2
        assert "--percent" in capsys.readouterr().err
    assert await asyncio.to_thread(cli.main, ["agents", "activate", agent_id, "2",
                                              "--percent", "100"]) == 0
    live = (await hosting.live([agent_id]))[agent_id]
    assert (live.live_version, live.canary_version) == (2, None)


@given(agent_id=st.text(max_size=20), session=st.text(max_size=40),
       percent=st.integers(1, 99))
def test_the_choice_is_a_pure_function_of_agent_and_session(
    agent_id: str, session: str, percent: int
) -> None:
    """Any ids (lone surrogates included): a bucket in 0-99, the canary exactly when the
    bucket is below N, the same answer every time."""
    b = bucket(agent_id, session)
    assert 0 <= b < 100 and bucket(agent_id, session) == b
    version, is_canary = choose_version(agent_id, session, 1, 2, percent)
    assert is_canary == (b < percent) and version == (2 if is_canary else 1)
    assert choose_version(agent_id, session, 1, None, percent) == (1, False)


