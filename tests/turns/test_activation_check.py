"""``agents activate AGENT V --check N`` replays the agent's last N recorded conversations
against V: a version that changes nothing activates, a wording change or a behaviour change is
reported CHANGED per conversation and a version that cannot be replayed UNDECIDABLE, both
refused unless ``--accept-changes``."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from consumer import cli
from consumer.hosting.routing import RegistryRouter
from consumer.outbox import OutboxPublisher
from consumer.turns.parser import ParsedInput, parse_record
from consumer.turns.pipeline import OutboundTopics, SourceRecord, TurnPipeline, TurnWork
from engine.clock import FakeClock
from engine.packs import PackSet
from engine.providers import RuleProvider
from engine.recording import recorded_agent
from store import Store
from store.hosting import Hosting
from tests.consumer.fakes import FakeProducer
from tests.consumer.test_pinning import DAYS, _booking, _put


def _work(session_id: str, text: str, offset: int, agent_id: str) -> TurnWork:
    import json

    raw = json.dumps({"session_id": session_id, "message": text, "id": f"m{offset}",
                      "agent_id": agent_id}).encode()
    parsed = parse_record(session_id.encode(), raw, max_bytes=10_000)
    assert isinstance(parsed, ParsedInput)
    return TurnWork(parsed=parsed, source=SourceRecord("in", 0, offset))


async def _record(store: Store, agent_id: str, conversations: int) -> list[str]:
    """Conversations answered by the agent's live version through the real pipeline, saved
    with their model replies as the consumer saves them."""
    router = RegistryRouter(Hosting(store.engine), PackSet(), provider=RuleProvider(),
                            clock=FakeClock("2026-12-04T10:00:00Z"), refresh_s=0,
                            prepare=recorded_agent)
    pipeline = TurnPipeline(store=store, agent=None, router=router,
                            publisher=OutboxPublisher(store, FakeProducer()),  # type: ignore[arg-type]
                            topics=OutboundTopics(messages="m", schedule="s"),
                            recording="envelopes")
    sessions = [f"chk-{uuid.uuid4().hex[:8]}" for _ in range(conversations)]
    offset = abs(hash(agent_id)) % 1_000_000 * 100
    for n, session in enumerate(sessions):
        for text in ("I want to book", DAYS[n % 5]):
            offset += 1
            await pipeline.apply(_work(session, text, offset, agent_id))
    return sessions


async def _cli(argv: list[str]) -> int:
    return await asyncio.to_thread(cli.main, argv)


def _changed_wording(document: dict[str, Any]) -> dict[str, Any]:
    document["flows"][0]["steps"][1]["say"] = "v1: all set for {{day}}!"
    return document


def _changed_behaviour(document: dict[str, Any]) -> dict[str, Any]:
    document["flows"][0]["steps"].insert(1, {"id": "sure", "collect": ["sure"],
                                             "prompt": "Ask if they are sure."})
    document["fields"]["sure"] = {"type": "boolean", "ask": "Are you sure?"}
    return document


async def test_check_reports_each_conversation_and_refuses_changes(
    store: Store, database_url: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Four recorded conversations: a version equal in behaviour is identical for each and
    activates; a wording change and a behaviour change are CHANGED for each and not activated
    (exit 1) until ``--accept-changes``."""
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.delenv("PACKS", raising=False)
    hosting = Hosting(store.engine)
    agent_id = f"check-{uuid.uuid4().hex[:6]}"
    base = _booking(agent_id, "v1", "what")
    await _put(hosting, base)
    sessions = await _record(store, agent_id, 4)
    same = _booking(agent_id, "v1", "what") | {"persona": None}
    same["flows"][0]["description"] = "Book a repair."  # not in any prompt of these turns
    await hosting.put_version(agent_id=agent_id, workspace=same["workspace"], document=same,
                              digest="same-" + agent_id)
    wording = _changed_wording(_booking(agent_id, "v1", "what"))
    await hosting.put_version(agent_id=agent_id, workspace=wording["workspace"],
                              document=wording, digest="wording-" + agent_id)
    behaviour = _changed_behaviour(_booking(agent_id, "v1", "what"))
    await hosting.put_version(agent_id=agent_id, workspace=behaviour["workspace"],
                              document=behaviour, digest="behaviour-" + agent_id)

    assert await _cli(["agents", "activate", agent_id, "3", "--check", "10"]) == 1
    out = capsys.readouterr()
    lines = [line for line in out.out.splitlines() if "\t" in line]
    assert sorted(line.split("\t")[1] for line in lines) == sorted(sessions)
    assert all(line.startswith("CHANGED\t") for line in lines), lines
    assert "not activated" in out.err
    assert (await hosting.live([agent_id]))[agent_id].live_version == 1

    assert await _cli(["agents", "activate", agent_id, "4", "--check", "10"]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if "\t" in line]
    assert len(lines) == 4 and all(line.startswith("CHANGED\t") for line in lines), lines

    assert await _cli(["agents", "activate", agent_id, "2", "--check", "2"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "\t" in line]
    assert len(lines) == 2 and all(line.startswith("identical\t") for line in lines), out
    assert (await hosting.live([agent_id]))[agent_id].live_version == 2

    broken = _booking(agent_id, "v1", "what") | {"packs": ["not-installed"]}
    await hosting.put_version(agent_id=agent_id, workspace=broken["workspace"],
                              document=broken, digest="broken-" + agent_id)
    assert await _cli(["agents", "activate", agent_id, "5", "--check", "3"]) == 1
    out = capsys.readouterr()
    lines = [line for line in out.out.splitlines() if "\t" in line]
    assert len(lines) == 3 and all(line.startswith("UNDECIDABLE\t") for line in lines), lines
    assert "does not build" in lines[0] and "3 undecidable" in out.err
    assert (await hosting.live([agent_id]))[agent_id].live_version == 2

    assert await _cli(["agents", "activate", agent_id, "3", "--check", "4",
                       "--accept-changes"]) == 0
    assert (await hosting.live([agent_id]))[agent_id].live_version == 3


async def test_a_pin_lost_turn_is_logged_with_the_fallback_it_ran(store: Store) -> None:
    """A turn whose pinned version was deleted is logged with the ``fallback`` request it ran
    (``end_runs``), its ``version-gone`` outcome and the live version: the turn log says what
    happened and what the turn was asked."""
    from sqlalchemy import text

    hosting = Hosting(store.engine)
    agent_id = f"lost-{uuid.uuid4().hex[:6]}"
    await _put(hosting, _booking(agent_id, "v1", "what"))
    session = f"lost-{uuid.uuid4().hex[:8]}"
    router = RegistryRouter(hosting, PackSet(), provider=RuleProvider(), refresh_s=0)
    pipeline = TurnPipeline(store=store, agent=None, router=router,
                            publisher=OutboxPublisher(store, FakeProducer()),  # type: ignore[arg-type]
                            topics=OutboundTopics(messages="m", schedule="s"))
    await pipeline.apply(_work(session, "I want to book", 9_000_001, agent_id))  # asks, on v1
    await _put(hosting, _booking(agent_id, "v2", "when"))
    async with store.engine.begin() as connection:
        await connection.execute(
            text("DELETE FROM agent_versions WHERE agent_id = :a AND version = 1"),
            {"a": agent_id},
        )
    fresh = RegistryRouter(hosting, PackSet(), provider=RuleProvider(), refresh_s=0)
    pipeline = TurnPipeline(store=store, agent=None, router=fresh,
                            publisher=OutboxPublisher(store, FakeProducer()),  # type: ignore[arg-type]
                            topics=OutboundTopics(messages="m", schedule="s"))
    await pipeline.apply(_work(session, "friday", 9_000_002, agent_id))
    last = (await store.logged_turns([session]))[-1]
    assert last.input["fallback"]["end_runs"] is True
    assert last.input["fallback"]["reason"] == "pinned-version-deleted"
    assert "version-gone" in str(last.outcomes) and last.agent_version == 2


async def test_a_migrated_conversation_replays_identical(store: Store) -> None:
    """A conversation moved from version 1 to 2 by a run map, through the real pipeline,
    replays identical against the versions that answered it (the map is in the turn's input)."""
    from replay.registry import RegistryAgents
    from replay.session import replay_many
    from replay.source import read_conversations

    hosting = Hosting(store.engine)
    agent_id = f"migrep-{uuid.uuid4().hex[:6]}"
    await _put(hosting, _booking(agent_id, "v1", "what"))
    router = RegistryRouter(hosting, PackSet(), provider=RuleProvider(),
                            clock=FakeClock("2026-12-04T10:00:00Z"), refresh_s=0,
                            prepare=recorded_agent)
    pipeline = TurnPipeline(store=store, agent=None, router=router,
                            publisher=OutboxPublisher(store, FakeProducer()),  # type: ignore[arg-type]
                            topics=OutboundTopics(messages="m", schedule="s"),
                            recording="envelopes")
    sessions = [f"migrep-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    for n, session in enumerate(sessions):
        await pipeline.apply(_work(session, "I want to book", 8_000_000 + 2 * n, agent_id))
    await _put(hosting, _booking(agent_id, "v2", "when"))
    await hosting.activate(agent_id, 2, {"booking/what": "booking/when"})
    for n, session in enumerate(sessions):
        await pipeline.apply(_work(session, "friday", 8_000_001 + 2 * n, agent_id))
    logged = await store.logged_turns(sessions)
    assert [t.agent_version for t in logged].count(2) == 3
    summary = await replay_many(RegistryAgents(hosting, PackSet()),
                                read_conversations(store, sessions))
    assert summary.counts()["identical"] == 3, [r.departures for r in summary.reports]
