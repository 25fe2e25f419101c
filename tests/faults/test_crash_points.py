"""A consumer process that dies hard at each point of an input's path loses nothing on restart.

Each case: 24 inputs (4 sessions x 6) wait on two partitions; a consumer with
``TURNFLOW_CRASH_AT=<point>:<n>`` exits hard the n-th time it reaches the point; a second
consumer in the same group takes over. The ledger then compares the outbound topics with the
turn log: every input applied once, every reply published, nothing published unsaved,
duplicates identical, replies in order.
"""

from __future__ import annotations

import uuid

import pytest

from consumer.turns.crash import CRASH_EXIT_CODE, CRASH_POINTS
from tests.faults.ledger import TurnLog, check_all
from tests.faults.process import ConsumerProcess, SetupFactory, consumers, message

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(120)]

SESSIONS = 4
INPUTS_PER_SESSION = 6

# Which occurrence of the point crashes: a few turns in, so some work is done and committed,
# some saved but not committed, some not started. The first commit happens before any turn is
# done (it only records offset 0), hence the later one for ``before_commit``.
NTH = {"after_load": 5, "after_turn": 5, "after_save": 5, "after_publish": 5, "before_commit": 2}

# Points after which the crashed input (and maybe others) is saved but its offset uncommitted,
# so the restarted consumer must find records already applied and skip them.
SAVED_BEFORE_CRASH = {"after_save", "after_publish", "before_commit"}


@pytest.mark.parametrize("point", CRASH_POINTS)
async def test_crash_at_point_then_restart_applies_every_input_once(
    point: str, fault_setup: SetupFactory,
) -> None:
    """After a hard exit at the point and a restart in the same group, every input is applied
    exactly once, every reply and timer of the turn log reaches its topic in session order, and
    any repeat on the topic is the same record with the same key."""
    setup = await fault_setup()
    suffix = uuid.uuid4().hex[:6]
    sessions = [f"crash-{point}-{i}-{suffix}" for i in range(SESSIONS)]
    await setup.produce(
        [message(sid, f"m{j}") for j in range(INPUTS_PER_SESSION) for sid in sessions]
    )

    async with consumers() as started:
        crashing = ConsumerProcess(
            setup.env(TURNFLOW_CRASH_AT=f"{point}:{NTH[point]}"), "crashing"
        )
        started.append(crashing)
        await crashing.start(assigned=False)
        assert await crashing.wait(within=60) == CRASH_EXIT_CODE, crashing.raw[-20:]
        assert any(f"crash at {point}" in line for line in crashing.raw)

        survivor = ConsumerProcess(setup.env(), "restarted")
        started.append(survivor)
        await survivor.start()
        ledger = setup.ledger()
        await ledger.read(
            until=lambda led: led.has_replies({sid: INPUTS_PER_SESSION for sid in sessions}),
            within=60,
        )
        assert await survivor.stop() == 0
        if point in SAVED_BEFORE_CRASH:
            assert survivor.logged("replay skipped; outbox re-flushed") >= 1

    log = await TurnLog.read(setup.database_url, sessions)
    assert check_all(log, ledger, setup.inputs) == []
    for sid in sessions:
        assert ledger.texts(sid) == [f"{j + 1}:m{j}" for j in range(INPUTS_PER_SESSION)]
