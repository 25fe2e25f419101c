"""Replays the engine's ring of 50 input ids cannot catch, and records sent twice on purpose."""

from __future__ import annotations

import uuid

import pytest

from tests.faults.ledger import Ledger, TurnLog, check_all
from tests.faults.process import (
    MESSAGES,
    SCHEDULE,
    ConsumerProcess,
    FaultSetup,
    consumers,
    message,
)
from tests.fixtures.broker import TopicFactory

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(120)]

BUSY_INPUTS = 60  # more than the engine's ring of 50 input ids
SLOW_MS = 6000


def _ledger(setup: FaultSetup) -> Ledger:
    return Ledger(setup.bootstrap, messages_topic=setup.topics[MESSAGES],
                  schedule_topic=setup.topics[SCHEDULE])


async def test_more_than_fifty_inputs_behind_a_held_offset_survive_a_kill(
    kafka_bootstrap: str, database_url: str, kafka_topics: TopicFactory,
    kafka_is_embedded: bool,
) -> None:
    """A slow session at the head of a partition holds its committed offset while a busy
    session of the same partition applies 60 inputs; after a kill -9 all 60 records are
    replayed, and the turn log's source offsets (not the ring of 50 ids) skip every one."""
    setup = await FaultSetup.create(
        kafka_topics, kafka_bootstrap, database_url, embedded=kafka_is_embedded, partitions=1
    )
    suffix = uuid.uuid4().hex[:6]
    slow, busy = f"slow-{suffix}", f"busy-{suffix}"
    await setup.produce([message(slow, "devagar", delay_ms=SLOW_MS)])
    await setup.produce([message(busy, f"b{j}") for j in range(BUSY_INPUTS)])

    async with consumers() as started:
        first = ConsumerProcess(setup.env(), "first")
        started.append(first)
        await first.start()
        ledger = _ledger(setup)
        await ledger.read(until=lambda led: led.has_replies({busy: BUSY_INPUTS}),
                          within=SLOW_MS / 1000 - 1, settle=0)
        assert ledger.texts(slow) == []  # still sleeping: the partition's commit is held
        await first.kill()

        second = ConsumerProcess(setup.env(), "restarted")
        started.append(second)
        await second.start()
        await ledger.read(until=lambda led: led.has_replies({slow: 1, busy: BUSY_INPUTS}),
                          within=SLOW_MS / 1000 + 30)
        assert await second.stop() == 0
        assert second.logged("replay skipped; outbox re-flushed") == BUSY_INPUTS

    log = await TurnLog.read(database_url, [slow, busy])
    assert check_all(log, ledger, setup.inputs) == []
    assert ledger.texts(busy) == [f"{j + 1}:b{j}" for j in range(BUSY_INPUTS)]
    assert ledger.texts(slow) == ["1:devagar"]


async def test_the_same_record_produced_twice_is_applied_once(
    kafka_bootstrap: str, database_url: str, kafka_topics: TopicFactory,
    kafka_is_embedded: bool,
) -> None:
    """An adapter that produces the same input twice (two offsets, one input id) gets one
    applied turn and one reply; the second copy is logged as a duplicate and says nothing."""
    setup = await FaultSetup.create(
        kafka_topics, kafka_bootstrap, database_url, embedded=kafka_is_embedded
    )
    suffix = uuid.uuid4().hex[:6]
    sid, other = f"twice-{suffix}", f"other-{suffix}"
    first, again, last = message(sid, "a"), message(sid, "b"), message(sid, "c")
    await setup.produce([first, again, message(other, "x"), again, last, first])

    async with consumers() as started:
        process = ConsumerProcess(setup.env(), "consumer")
        started.append(process)
        await process.start()
        ledger = _ledger(setup)
        await ledger.read(until=lambda led: led.has_replies({sid: 3, other: 1}), settle=1.5)
        assert await process.stop() == 0

    log = await TurnLog.read(database_url, [sid, other])
    assert check_all(log, ledger, [first, again, last, setup.inputs[2]]) == []
    assert ledger.texts(sid) == ["1:a", "2:b", "3:c"]
    rows = [r for r in log.rows if r.session_id == sid]
    assert [r.applied for r in rows] == [True, True, False, True, False]
    assert all(not r.messages for r in rows if not r.applied)
