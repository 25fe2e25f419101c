"""An input that fails on every attempt goes to the DLQ without stopping its partition."""

from __future__ import annotations

import uuid

import pytest

from tests.faults.ledger import TurnLog, check_all
from tests.faults.process import DLQ, ConsumerProcess, SetupFactory, consumers, message
from tests.integration.harness import OutboundReader

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(120)]

OTHERS = 3
OTHER_INPUTS = 5


async def test_poison_input_goes_to_the_dlq_while_its_partition_flows(
    fault_setup: SetupFactory,
) -> None:
    """A poison input at the head of a one-partition topic is retried with backoff and then
    dead-lettered with its reason; meanwhile every other session of that partition is answered
    in full, and the poisoned session's next input is applied after it."""
    setup = await fault_setup(partitions=1)
    suffix = uuid.uuid4().hex[:6]
    poisoned = f"poison-{suffix}"
    others = [f"healthy-{i}-{suffix}" for i in range(OTHERS)]
    poison = message(poisoned, "veneno", poison=True)
    after = message(poisoned, "depois")
    healthy = [message(sid, f"m{j}") for j in range(OTHER_INPUTS) for sid in others]
    await setup.produce([poison, *healthy, after])

    # Two retries at 1 s and 2 s: the poison occupies its session for about 3 s.
    env = setup.env(MAX_RETRIES="2", RETRY_BACKOFF_MS="1000", RETRY_BACKOFF_MAX_MS="2000")
    async with consumers() as started:
        process = ConsumerProcess(env, "consumer")
        started.append(process)
        await process.start()
        async with OutboundReader(setup.bootstrap, setup.topics[DLQ]) as dlq:
            dead = await dlq.until(lambda values: len(values) >= 1, within=30)
            dead_record = dlq.records[0]
        ledger = setup.ledger()
        expected = {sid: OTHER_INPUTS for sid in others} | {poisoned: 1}
        await ledger.read(until=lambda led: led.has_replies(expected), within=30)
        assert await process.stop() == 0

    assert dead == [poison]
    headers = dict(dead_record.headers)
    assert headers["error"] == b"turn-failed"
    assert headers["detail"] == b"turn-failed after 3 attempts"
    assert process.logged("input sent to the DLQ") == 1
    last_healthy = max(
        ts for (sid, _key), ts in ledger.sent_at.items() if sid in others
    )
    assert last_healthy < dead_record.timestamp  # the partition did not wait for the poison
    log = await TurnLog.read(setup.database_url, [poisoned, *others])
    assert check_all(log, ledger, [*healthy, after]) == []
    assert all(r.input_id != poison["id"] for r in log.rows)
    assert ledger.texts(poisoned) == ["1:depois"]
