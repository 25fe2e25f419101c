"""The acks benchmark measures both ways of waiting on the same simulated turns."""

from __future__ import annotations

import asyncio

from bench.acks_bench import _gathered, _rounds, _turns
from consumer.outbox import _settled


def test_each_way_is_timed_in_every_round() -> None:
    taken = asyncio.run(_rounds(turns=50, rounds=3))
    assert set(taken) == {"gather", "one by one"}
    assert all(len(values) == 3 and all(v > 0 for v in values) for values in taken.values())


async def test_both_ways_wait_for_acks_the_loop_resolves_later() -> None:
    """Each simulated turn's acks are resolved by a later loop callback, so both ways really
    wait (``_turns`` asserts every outcome)."""
    for wait in (_gathered, _settled):
        assert await _turns(wait, 20) > 0
    loop = asyncio.get_running_loop()
    acks = [loop.create_future(), loop.create_future()]
    waiting = asyncio.ensure_future(_settled(acks))
    await asyncio.sleep(0)
    assert not waiting.done()  # nothing resolved yet: it is waiting, not returning at once
    for ack in acks:
        ack.set_result(None)
    assert await waiting == [None, None]
