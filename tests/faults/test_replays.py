"""Replays the engine's ring of 50 input ids cannot catch, and records sent twice on purpose."""

from __future__ import annotations

import uuid

import pytest

from tests.faults.ledger import TurnLog, check_all
from tests.faults.process import ConsumerProcess, SetupFactory, consumers, message

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(120)]

BUSY_INPUTS = 60  # more than the engine's ring of 50 input ids
SLOW_MS = 6000


async def test_more_than_fifty_inputs_behind_a_held_offset_survive_a_kill(
    fault_setup: SetupFactory,
) -> None:
    """A slow session at the head of a partition holds its committed offset while a busy
    session of the same partition applies 60 inputs; after a kill -9 all 60 records are
    replayed, and the turn log's source offsets (not the ring of 50 ids) skip every one."""
    setup = await fault_setup(partitions=1)
    suffix = uuid.uuid4().hex[:6]
    slow, busy = f"slow-{suffix}", f"busy-{suffix}"
    await setup.produce([message(slow, "devagar", delay_ms=SLOW_MS)])
    await setup.produce([message(busy, f"b{j}") for j in range(BUSY_INPUTS)])

    async with consumers() as started:
        first = ConsumerProcess(setup.env(), "first")
        started.append(first)
        await first.start()
        ledger = setup.ledger()
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

    log = await TurnLog.read(setup.database_url, [slow, busy])
    assert check_all(log, ledger, setup.inputs) == []
    assert ledger.texts(busy) == [f"{j + 1}:b{j}" for j in range(BUSY_INPUTS)]
    assert ledger.texts(slow) == ["1:devagar"]


async def test_the_same_record_produced_twice_is_applied_once(fault_setup: SetupFactory) -> None:
    """An adapter that produces the same input twice (two offsets, one input id) gets one
    applied turn and one reply; the second copy is logged as a duplicate, writes no turn and
    says nothing."""
    setup = await fault_setup()
    suffix = uuid.uuid4().hex[:6]
    sid, other = f"twice-{suffix}", f"other-{suffix}"
    first, again, last = message(sid, "a"), message(sid, "b"), message(sid, "c")
    await setup.produce([first, again, message(other, "x"), again, last, first])

    async with consumers() as started:
        process = ConsumerProcess(setup.env(), "consumer")
        started.append(process)
        await process.start()
        ledger = setup.ledger()
        await ledger.read(until=lambda led: led.has_replies({sid: 3, other: 1}), settle=1.5)
        assert await process.stop() == 0
        assert process.logged("duplicate input skipped; outbox re-flushed") == 2

    log = await TurnLog.read(setup.database_url, [sid, other])
    assert check_all(log, ledger, [first, again, last, setup.inputs[2]]) == []
    assert ledger.texts(sid) == ["1:a", "2:b", "3:c"]
    rows = [r for r in log.rows if r.session_id == sid]
    assert [r.applied for r in rows] == [True, True, True]
    assert [r.input_id for r in rows] == [first["id"], again["id"], last["id"]]
