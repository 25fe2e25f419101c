"""A timer's whole trip: consumer → outbound.schedule → scheduler → inbound.turns → consumer.

The agent greets, waits on a short timer, and when the timer fires (``no-reply``) runs its next
steps and says one more line. Nothing but the scheduler turns that timer into the wake.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest

from consumer.scheduler.service import FiringOptions, build_scheduler
from engine import Agent, ok
from store import Store
from tests.integration.harness import (
    INBOUND,
    SCHEDULE,
    ServiceSetup,
    SetupFactory,
    load_when,
    running_consumer,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def nudging_agent() -> Agent:
    """Says hello, parks on a 1.5 s timer, and on ``no-reply`` marks the session and nudges.

    The step after the wait is a ``do``, so the wait is a real timer, not an inline delay.
    """

    async def mark(ctx: Any) -> Any:
        return ok(data={"nudged": True})

    return Agent(
        name="Lembrete",
        fields={"nudged": {"type": "boolean"}},
        actions={"mark": mark},
        flows=[{
            "id": "greet",
            "on": [{"message": []}],
            "steps": [
                {"id": "hello", "say": "Olá!"},
                {"id": "w", "wait": {"ms": 1500}, "then": "mark", "else": "end"},
                {"id": "mark", "do": "mark"},
                {"id": "nudge", "say": "Ainda está aí?"},
            ],
        }],
    )


async def turn_outcomes(
    database_url: str, session_id: str
) -> list[tuple[dict[str, Any], list[str]]]:
    """Each logged turn of the session: its input and its outcome codes, in order."""
    connection = await asyncpg.connect(database_url)
    try:
        rows = await connection.fetch(
            "SELECT input, outcomes FROM turns WHERE session_id = $1 ORDER BY version",
            session_id,
        )
    finally:
        await connection.close()
    return [
        (json.loads(r["input"]), [o["code"] for o in json.loads(r["outcomes"])]) for r in rows
    ]


@asynccontextmanager
async def running_scheduler(
    store: Any, setup: ServiceSetup, *, group_id: str, options: FiringOptions
) -> AsyncIterator[None]:
    """The scheduler on this test's schedule and inbound topics, running until the block ends
    and then stopped (a stop that takes over 30 s fails the test)."""
    scheduler = build_scheduler(
        store,
        bootstrap_servers=setup.bootstrap,
        schedule_topic=setup.topics[SCHEDULE],
        inbound_topic=setup.topics[INBOUND],
        group_id=group_id,
        options=options,
    )
    stop = asyncio.Event()
    scheduling = asyncio.create_task(scheduler.run(stop))
    try:
        yield
    finally:
        stop.set()
        async with asyncio.timeout(30):
            await scheduling


async def test_timer_wait_resumes_through_the_scheduler(
    store: Store, service_setup: SetupFactory,
) -> None:
    """A timer wait fires via the scheduler: `no-reply`, the next steps run, and the nudge is
    published on outbound.messages after the greeting."""
    setup = await service_setup()
    session_id = f"nudge-{uuid.uuid4().hex[:8]}"
    settings = setup.settings()
    async with (
        running_scheduler(store, setup, group_id=f"{settings.group_id}-scheduler",
                          options=FiringOptions(max_idle=1.0)),
        running_consumer(settings, nudging_agent()),
    ):
        await setup.produce([{"session_id": session_id, "message": "oi", "id": "m1"}])
        async with setup.reader() as replies:
            values = await replies.until(lambda v: len(v) >= 2, within=60)
        loaded = await load_when(
            setup.database_url, session_id, lambda s: s.version >= 2, within=30
        )

    assert [(v["session_id"], v["text"]) for v in values] == [
        (session_id, "Olá!"), (session_id, "Ainda está aí?"),
    ]
    turns = await turn_outcomes(setup.database_url, session_id)
    assert len(turns) == 2
    wake_input, wake_codes = turns[1]
    assert set(wake_input) == {"session_id", "wake"}
    assert "no-reply" in wake_codes
    assert loaded.state is not None
    assert loaded.state["data"]["nudged"] is True
    assert loaded.state["runs"] == []
    assert await store.timers_pending() == 0


async def test_dozens_of_conversations_parked_on_one_step_each_wake_once(
    store: Store, service_setup: SetupFactory,
) -> None:
    """Forty conversations park on the same timer step at once: every one is woken exactly
    once, for itself, and gets its own nudge; no key is shared between two of them."""
    setup = await service_setup()
    run = uuid.uuid4().hex[:6]
    sessions = [f"park-{run}-{i:02d}" for i in range(40)]
    settings = setup.settings()
    async with (
        running_scheduler(store, setup, group_id=f"{settings.group_id}-scheduler",
                          options=FiringOptions(max_idle=1.0)),
        running_consumer(settings, nudging_agent()),
    ):
        await setup.produce(
            [{"session_id": s, "message": "oi", "id": "m1"} for s in sessions]
        )
        async with setup.reader() as replies:
            values = await replies.until(lambda v: len(v) >= 2 * len(sessions), within=90)
            values = await replies.settle(2.0)
        async with setup.reader(SCHEDULE) as scheduled:
            timers = await scheduled.until(lambda v: len(v) >= len(sessions), within=30)
        async with setup.reader(INBOUND) as inbound:
            wakes = [v for v in await inbound.settle(1.0) if "wake" in v]

    for session_id in sessions:
        mine = [v["text"] for v in values if v["session_id"] == session_id]
        assert mine == ["Olá!", "Ainda está aí?"], session_id
        turns = await turn_outcomes(setup.database_url, session_id)
        assert [codes[0] for _, codes in turns[1:]] == ["no-reply"], session_id
    assert sorted(w["session_id"] for w in wakes) == sorted(sessions)
    timer_keys = [t["key"] for t in timers]
    assert len(set(timer_keys)) == len(sessions)
    assert {w["wake"] for w in wakes} == set(timer_keys)
    reply_keys = [v["key"] for v in values]
    assert len(set(reply_keys)) == len(reply_keys)
    assert await store.timers_pending() == 0


class CrashBeforeDeleteStore:
    """The real store, except that the first claim that fires something "crashes" after its
    wakes are acknowledged and before its rows are deleted (the transaction rolls back)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.crashes = 0

    @asynccontextmanager
    async def claim_due(self, limit: int) -> AsyncIterator[Any]:
        async with self._store.claim_due(limit) as claim:
            if claim.timers and not self.crashes:
                self.crashes += 1
                yield _NoDelete(claim)
            else:
                yield claim

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class _NoDelete:
    def __init__(self, claim: Any) -> None:
        self.timers = claim.timers
        self.db_now = claim.db_now

    async def delete(self) -> int:
        raise ConnectionResetError("the scheduler died before deleting")


async def test_a_wake_fired_twice_is_harmless(
    store: Store, service_setup: SetupFactory,
) -> None:
    """A crash between the ack and the delete fires the timer again; the second wake is a
    `stale-wake` and the customer still gets one nudge."""
    setup = await service_setup()
    session_id = f"twice-{uuid.uuid4().hex[:8]}"
    settings = setup.settings()
    crashing = CrashBeforeDeleteStore(store)
    async with (
        running_scheduler(crashing, setup, group_id=f"{settings.group_id}-scheduler",
                          options=FiringOptions(max_idle=1.0, retry_delay=0.2)),
        running_consumer(settings, nudging_agent()),
    ):
        await setup.produce([{"session_id": session_id, "message": "oi", "id": "m1"}])
        async with setup.reader(INBOUND) as inbound:
            wakes = await inbound.until(lambda v: sum("wake" in x for x in v) >= 2, within=60)
        async with setup.reader() as replies:
            values = await replies.until(lambda v: len(v) >= 2, within=60)
            # Both wakes are on the topic; give the second one time to be applied.
            values = await replies.settle(3.0)

    assert crashing.crashes == 1
    fired = [w["wake"] for w in wakes if "wake" in w]
    assert len(fired) == 2 and fired[0] == fired[1]
    turns = await turn_outcomes(setup.database_url, session_id)
    assert [codes for _, codes in turns][1:] == [
        ["no-reply", "action-ok", "said", "completed"], ["stale-wake"],
    ]
    assert [v["text"] for v in values] == ["Olá!", "Ainda está aí?"]
    assert await store.timers_pending() == 0
