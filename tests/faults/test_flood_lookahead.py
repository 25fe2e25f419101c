"""A flood held in the look-ahead, or passed over beyond it: a rebalance hands it over, and a
kill -9 loses none of it."""

from __future__ import annotations

import uuid

import pytest

from tests.faults.ledger import TurnLog, check_all
from tests.faults.process import ConsumerProcess, SetupFactory, consumers, message
from tests.integration.harness import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(240)]

FLOOD_SESSIONS = 60
PER_SESSION = 8
QUIET_SESSIONS = 4


@pytest.mark.parametrize("look_ahead", ["2000", "40"], ids=["held", "passed-over"])
async def test_a_flood_in_the_look_ahead_survives_a_rebalance_and_a_kill(
    fault_setup: SetupFactory, look_ahead: str
) -> None:
    """480 inputs of 60 conversations arrive at once on four partitions, far more than two
    consumers running four 100 ms turns each can answer quickly, so each holds hundreds of
    fetched records in its look-ahead. A third consumer joins a quarter of the way in (a
    rebalance hands partitions over with their look-ahead in memory), then one of the first
    two is killed with SIGKILL halfway. Every input, and a few quiet conversations' sent
    meanwhile, is applied exactly once with every reply published in its conversation's
    order, by the ledger's checks.

    With a look-ahead of 40 records (20 a partition) most of the flood is not held but passed
    over and read again as room frees: the rebalance and the kill then come while records are
    passed over (the consumers log their re-reads), and the commit must never have moved past
    one of them."""
    setup = await fault_setup(partitions=4)
    run = uuid.uuid4().hex[:6]
    flood = [f"flood-{run}-{i}" for i in range(FLOOD_SESSIONS)]
    quiet = [f"quiet-{run}-{i}" for i in range(QUIET_SESSIONS)]
    env = setup.env(MAX_IN_FLIGHT="4", MAX_BUFFERED_RECORDS=look_ahead)

    async with consumers() as started:
        a, b = ConsumerProcess(env, "a"), ConsumerProcess(env, "b")
        started += [a, b]
        await a.start()
        await b.start()
        await setup.produce([message(sid, f"m{j}", delay_ms=100)
                             for j in range(PER_SESSION) for sid in flood])
        total = FLOOD_SESSIONS * PER_SESSION

        def applied() -> int:
            return sum(p.logged("turn applied") for p in started)

        await wait_until(lambda: applied() >= total // 4, within=90)
        c = ConsumerProcess(env, "c")
        started.append(c)
        await c.start()  # returns once c holds partitions: the rebalance is done
        await setup.produce([message(sid, "q0") for sid in quiet])
        await wait_until(lambda: applied() >= total // 2, within=90)
        assert b.logged("turn applied") > 0  # the victim was doing work when it died
        if look_ahead == "40":  # the victim had passed records over and was reading them again
            assert b.logged("passed-over records read again") > 0
        await b.kill()
        await setup.produce([message(sid, "q1") for sid in quiet])

        ledger = setup.ledger()
        expected = {sid: PER_SESSION for sid in flood} | {sid: 2 for sid in quiet}
        await ledger.read(until=lambda led: led.has_replies(expected), within=120)
        assert await a.stop() == 0
        assert await c.stop() == 0

    log = await TurnLog.read(setup.database_url, flood + quiet)
    assert check_all(log, ledger, setup.inputs) == []
    for sid in flood:
        assert ledger.texts(sid) == [f"{j + 1}:m{j}" for j in range(PER_SESSION)]
    for sid in quiet:
        assert ledger.texts(sid) == ["1:q0", "2:q1"]
