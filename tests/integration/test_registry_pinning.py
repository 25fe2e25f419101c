"""Conversations parked under one agent version across an activation that renames, reorders
and removes their steps, on the real consumer and scheduler: each finishes on the version it
started on (customer answers and timers alike), while new conversations take the live one."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from consumer.scheduler.service import FiringOptions
from engine.definition import definition_digest
from store import Store
from store.hosting import Hosting
from tests.integration.harness import SetupFactory, running_consumer
from tests.integration.test_scheduler_e2e import running_scheduler

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday"]
REFRESH_MS = 100


def _v1(agent_id: str, workspace: str) -> dict[str, Any]:
    """Asks for a day then books; or promises a call-back on a 5 s timer (a real one: a ``do``
    follows the wait)."""
    return {
        "agent_id": agent_id, "workspace": workspace, "name": "Bot",
        "packs": ["nudges"],
        "fields": {"day": {"type": "string", "enum": DAYS, "ask": "Which day?"},
                   "nudged": {"type": "boolean"},
                   "confirmed": {"type": "boolean", "ask": "Shall I place it (yes or no)?"}},
        "flows": [
            {"id": "booking", "on": [{"message": ["book"]}], "steps": [
                {"id": "what", "collect": ["day"], "prompt": "Ask for the day."},
                {"id": "done", "say": "v1: booked {{day}}"},
            ]},
            {"id": "order", "on": [{"message": ["order"]}], "steps": [
                {"id": "sure", "collect": ["confirmed"], "prompt": "Ask them to confirm."},
                {"id": "place", "do": "mark"},
                {"id": "placed", "say": "v1: ordered"},
            ]},
            {"id": "callback", "on": [{"message": ["call me"]}], "steps": [
                {"id": "promise", "say": "v1: will call"},
                {"id": "w", "wait": {"ms": 5000}, "then": "mark", "else": "end"},
                {"id": "mark", "do": "mark"},
                {"id": "call", "say": "v1: calling back"},
            ]},
        ],
    }


def _v2(agent_id: str, workspace: str) -> dict[str, Any]:
    """The booking steps renamed and reordered, the order and call-back flows removed."""
    return {
        "agent_id": agent_id, "workspace": workspace, "name": "Bot",
        "packs": ["nudges"],
        "fields": {"day": {"type": "string", "enum": DAYS, "ask": "Which day?"},
                   "nudged": {"type": "boolean"}},
        "flows": [
            {"id": "booking", "on": [{"message": ["book"]}], "steps": [
                {"id": "when", "collect": ["day"], "prompt": "Ask for the day, please."},
                {"id": "booked", "say": "v2: booked {{day}}"},
            ]},
        ],
    }


async def _put(hosting: Hosting, document: dict[str, Any]) -> int:
    result = await hosting.put_version(
        agent_id=document["agent_id"], workspace=document["workspace"], document=document,
        digest=definition_digest(document), activate=True,
    )
    return result.version


def _texts(values: list[dict[str, Any]], session_id: str) -> list[str]:
    return [v["text"] for v in values if v["session_id"] == session_id]


@dataclass
class Parked:
    """Conversations started on version 1 of a registry agent, the consumer and the scheduler
    running: each asking, timer and confirming conversation has had its first answer."""

    hosting: Hosting
    agent_id: str
    workspace: str
    asking: list[str]
    timers: list[str]
    confirming: list[str]


@asynccontextmanager
async def parked_on_v1(
    store: Store, setup: Any, prefix: str, *, asking: int, timers: int, confirming: int = 0
) -> AsyncIterator[Parked]:
    tag = uuid.uuid4().hex[:6]
    parked = Parked(
        Hosting(store.engine), f"{prefix}-{tag}", f"ws-{tag}",
        [f"ask{i}-{tag}" for i in range(asking)], [f"timer{i}-{tag}" for i in range(timers)],
        [f"confirm{i}-{tag}" for i in range(confirming)],
    )
    assert await _put(parked.hosting, _v1(parked.agent_id, parked.workspace)) == 1
    settings = setup.settings(agent_registry=True, agent_refresh_ms=REFRESH_MS,
                              packs="tests.integration.test_registry_scheduler:pack")
    first = {"I want to book": parked.asking, "please call me": parked.timers,
             "I want to order": parked.confirming}
    async with (
        running_scheduler(store, setup, group_id=f"{settings.group_id}-scheduler",
                          options=FiringOptions(max_idle=1.0)),
        running_consumer(settings, None),
    ):
        await setup.produce(
            [{"session_id": s, "message": text, "id": "m1", "agent_id": parked.agent_id}
             for text, sessions in first.items() for s in sessions]
        )
        started = parked.asking + parked.timers + parked.confirming
        async with setup.reader() as replies:
            await replies.until(lambda v: all(_texts(v, s) for s in started), within=60)
        yield parked


async def test_parked_conversations_finish_on_their_version_after_an_activation(
    store: Store, service_setup: SetupFactory
) -> None:
    """Eight conversations asking for a field, six waiting for a confirmation and six parked
    on a timer under version 1 each finish on version 1 (the confirmed action runs) after
    version 2 renames and removes those steps and flows; new ones answer on version 2."""
    setup = await service_setup(partitions=2)
    fresh = [f"new{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    async with parked_on_v1(store, setup, "pin", asking=8, timers=6, confirming=6) as parked:
        hosting, agent_id, workspace = parked.hosting, parked.agent_id, parked.workspace
        asking, timers, confirming = parked.asking, parked.timers, parked.confirming
        assert await _put(hosting, _v2(agent_id, workspace)) == 2
        await asyncio.sleep(5 * REFRESH_MS / 1000)
        await setup.produce(
            [{"session_id": s, "message": DAYS[i % 5], "id": "m2"}
             for i, s in enumerate(asking)]
            + [{"session_id": s, "message": "book friday", "id": "m1", "agent_id": agent_id}
               for s in fresh]
            + [{"session_id": s, "message": "yes", "id": "m2"} for s in confirming]
        )
        async with setup.reader() as replies:
            values = await replies.until(
                lambda v: all("v1: booked" in " ".join(_texts(v, s)) for s in asking)
                and all("v1: calling back" in _texts(v, s) for s in timers)
                and all("v2: booked friday" in _texts(v, s) for s in fresh)
                and all("v1: ordered" in _texts(v, s) for s in confirming),
                within=90,
            )

    for i, s in enumerate(asking):
        assert _texts(values, s)[-1] == f"v1: booked {DAYS[i % 5]}"
    for s in timers:
        assert _texts(values, s) == ["v1: will call", "v1: calling back"]
    for s in fresh:
        assert _texts(values, s)[-1] == "v2: booked friday"
    for s in confirming:  # the confirmed action ran (on version 1) and said so
        assert _texts(values, s)[-1] == "v1: ordered"
    logged = await store.logged_turns(sorted(asking + timers + fresh + confirming))
    versions = {(t.session_id, t.agent_version) for t in logged}
    assert {v for s, v in versions if s in asking + timers + confirming} == {1}
    assert {v for s, v in versions if s in fresh} == {2}
    assert not any("step-gone" in str(t) or "flow-gone" in str(t) for t in logged)


async def test_a_deleted_version_answers_its_parked_conversations_with_the_fallback(
    store: Store, service_setup: SetupFactory
) -> None:
    """Version 1 deleted by hand while conversations ask and wait on a timer under it: the
    customer's answer and the timer's wake each get the fallback message (never silence),
    their runs end ``version-gone`` in the turn log, and the next message runs on version 2."""
    from sqlalchemy import text

    setup = await service_setup(partitions=2)
    tag = uuid.uuid4().hex[:6]
    agent_id, workspace = f"gone-{tag}", f"ws-{tag}"
    hosting = Hosting(store.engine)
    await _put(hosting, _v1(agent_id, workspace))
    asking = [f"ask{i}-{tag}" for i in range(4)]
    timers = [f"timer{i}-{tag}" for i in range(3)]
    settings = setup.settings(
        agent_registry=True, agent_refresh_ms=REFRESH_MS,
        packs="tests.integration.test_registry_scheduler:pack",
        model_fallback_message="Sorry, please write again.",
    )
    async with running_scheduler(store, setup, group_id=f"{settings.group_id}-scheduler",
                                 options=FiringOptions(max_idle=1.0)):
        async with running_consumer(settings, None):
            await setup.produce(
                [{"session_id": s, "message": "I want to book", "id": "m1",
                  "agent_id": agent_id} for s in asking]
                + [{"session_id": s, "message": "please call me", "id": "m1",
                    "agent_id": agent_id} for s in timers]
            )
            async with setup.reader() as replies:
                await replies.until(lambda v: all(_texts(v, s) for s in asking + timers),
                                    within=60)
        # Deleted while no consumer holds it built: the next consumer cannot build it.
        await _put(hosting, _v2(agent_id, workspace))
        async with store.engine.begin() as connection:
            await connection.execute(
                text("DELETE FROM agent_versions WHERE agent_id = :a AND version = 1"),
                {"a": agent_id},
            )
        async with running_consumer(settings, None):
            await setup.produce([{"session_id": s, "message": "monday", "id": "m2"}
                                 for s in asking])
            async with setup.reader() as replies:
                values = await replies.until(
                    lambda v: all("Sorry, please write again." in _texts(v, s)
                                  for s in asking + timers), within=90,
                )
            await setup.produce([{"session_id": s, "message": "book friday", "id": "m3"}
                                 for s in asking])
            async with setup.reader() as replies:
                values = await replies.until(
                    lambda v: all("v2: booked friday" in _texts(v, s) for s in asking),
                    within=60,
                )
    for s in timers:
        assert _texts(values, s) == ["v1: will call", "Sorry, please write again."]
    logged = await store.logged_turns(sorted(asking + timers))
    gone = [t for t in logged if "version-gone" in str(t.outcomes)]
    assert {t.session_id for t in gone} == set(asking + timers)
    assert not any("step-gone" in str(t.outcomes) or "flow-gone" in str(t.outcomes)
                   for t in logged)


async def test_a_canary_splits_new_conversations_alike_on_two_consumers(
    store: Store, service_setup: SetupFactory
) -> None:
    """Two consumers of one group share the partitions of 300 new conversations with a 30%
    canary: each conversation ran on the version its session id chooses, whichever consumer
    took it, and the split is within a few points of 30%."""
    from consumer.hosting.canary import choose_version

    setup = await service_setup(partitions=4)
    tag = uuid.uuid4().hex[:6]
    agent_id, workspace = f"ramp-{tag}", f"ws-{tag}"
    hosting = Hosting(store.engine)
    await _put(hosting, _v1(agent_id, workspace))
    await _put(hosting, _v2(agent_id, workspace))
    await hosting.activate(agent_id, 1)
    await hosting.set_canary(agent_id, 2, 30)
    sessions = [f"wa:{tag}-{n:04d}" for n in range(300)]
    settings = setup.settings(agent_registry=True, agent_refresh_ms=REFRESH_MS,
                              packs="tests.integration.test_registry_scheduler:pack")
    async with running_consumer(settings, None) as one, running_consumer(settings, None) as two:
        await setup.produce([{"session_id": s, "message": "book friday", "id": "m1",
                              "agent_id": agent_id} for s in sessions])
        async with setup.reader() as replies:
            values = await replies.until(lambda v: all(_texts(v, s) for s in sessions),
                                         within=120)
        assert one.assignment and two.assignment  # both consumers took partitions
    logged = await store.logged_turns(sessions)
    ran = {t.session_id: t.agent_version for t in logged}
    expected = {s: choose_version(agent_id, s, 1, 2, 30)[0] for s in sessions}
    assert ran == expected
    on_canary = sum(1 for v in ran.values() if v == 2)
    assert 60 <= on_canary <= 120, on_canary
    for s in sessions:
        assert _texts(values, s)[-1] == f"v{expected[s]}: booked friday"


async def test_a_run_map_moves_parked_conversations_on_the_real_consumer(
    store: Store, service_setup: SetupFactory
) -> None:
    """Activated with the map booking/what -> booking/when, conversations asking under
    version 1 answer on version 2 (the map logged in that turn's input); those on the unmapped
    call-back timer still finish on version 1."""
    setup = await service_setup(partitions=2)
    async with parked_on_v1(store, setup, "mig", asking=5, timers=3) as parked:
        hosting, agent_id, workspace = parked.hosting, parked.agent_id, parked.workspace
        asking, timers = parked.asking, parked.timers
        v2 = _v2(agent_id, workspace)
        await hosting.put_version(agent_id=agent_id, workspace=workspace, document=v2,
                                  digest=definition_digest(v2))
        await hosting.activate(agent_id, 2, {"booking/what": "booking/when"})
        await asyncio.sleep(5 * REFRESH_MS / 1000)
        await setup.produce([{"session_id": s, "message": DAYS[i % 5], "id": "m2"}
                             for i, s in enumerate(asking)])
        async with setup.reader() as replies:
            values = await replies.until(
                lambda v: all("v2: booked" in " ".join(_texts(v, s)) for s in asking)
                and all("v1: calling back" in _texts(v, s) for s in timers), within=90,
            )
    for i, s in enumerate(asking):
        assert _texts(values, s)[-1] == f"v2: booked {DAYS[i % 5]}"
    logged = await store.logged_turns(sorted(asking + timers))
    moved = [t for t in logged if t.session_id in asking and t.agent_version == 2]
    assert len(moved) == len(asking)
    assert all(t.input["migrate_runs"] == {"booking/what": "booking/when"} for t in moved)
    assert {t.agent_version for t in logged if t.session_id in timers} == {1}
