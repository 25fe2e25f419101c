"""A broker fault in the middle of the load, and the checks that nothing was lost.

The broker outage and the broker restart differ only in what happens to the broker; the load
around it is the same. Half the inputs go in with every turn held ``DELAY_MS`` so that they are
still in flight when the fault comes; the other half go in once it is over. Then the ledger of the
outbound topics is compared with the turn log: each input applied once, every reply in session
order, duplicates only with the same key, and exactly the replies the counting agent gives.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from tests.faults.ledger import TurnLog, check_all
from tests.faults.process import ConsumerProcess, FaultSetup, consumers, message
from tests.integration.harness import wait_until

SESSIONS = 6
ROUNDS = 8
DELAY_MS = 150  # per turn of the first half, so it is still in flight when the fault comes


async def load_through_fault(
    setup: FaultSetup, fault: Callable[[], Awaitable[None]], *, label: str,
    replies_within: float,
) -> None:
    """Run a consumer process through ``fault()`` mid-load and check the outcome.

    Asserts that the fault came while first-half turns were still unapplied, that the consumer
    process survived it, and that every input was applied once with every reply delivered in
    order within ``replies_within`` seconds of the second half.
    """
    suffix = uuid.uuid4().hex[:6]
    sessions = [f"{label}-{i}-{suffix}" for i in range(SESSIONS)]
    half = ROUNDS // 2
    first_half = SESSIONS * half

    async with consumers() as started:
        process = ConsumerProcess(setup.env(), "consumer")
        started.append(process)
        await process.start()
        await setup.produce([
            message(sid, f"m{j}", delay_ms=DELAY_MS) for j in range(half) for sid in sessions
        ])
        await wait_until(lambda: process.logged("turn applied") >= SESSIONS, within=30)

        applied_at_fault = process.logged("turn applied")
        await fault()
        assert applied_at_fault < first_half  # the fault came in the middle of the load
        assert process.returncode is None  # the consumer rode it out

        await setup.produce(
            [message(sid, f"m{j}") for j in range(half, ROUNDS) for sid in sessions]
        )
        ledger = setup.ledger()
        await ledger.read(until=lambda led: led.has_replies({sid: ROUNDS for sid in sessions}),
                          within=replies_within)
        assert await process.stop() == 0

    log = await TurnLog.read(setup.database_url, sessions)
    assert check_all(log, ledger, setup.inputs) == []
    for sid in sessions:
        assert ledger.texts(sid) == [f"{j + 1}:m{j}" for j in range(ROUNDS)]
