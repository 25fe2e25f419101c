"""Seeing past a flood: the passing-over rules on their own, under any interleaving of reads,
finished records and re-reads, and one consumer answering a quiet workspace behind a flood far
larger than its look-ahead, with nothing lost, doubled or reordered."""

from __future__ import annotations

import asyncio
import json
import random
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer import metrics
from consumer.turns.backpressure import Backpressure
from consumer.turns.passing import LookAhead, PassOver, Tenants
from consumer.turns.watermarks import OffsetWatermarks
from tests.consumer.fakes import FakeStore
from tests.turns.test_backpressure import until
from tests.turns.test_fairness import PART, OneConsumer, WorkspaceAgent

# --- the rules -------------------------------------------------------------------------------


def test_a_partition_under_its_share_admits_everything() -> None:
    passing: PassOver[str] = PassOver(100)
    assert all(passing.seen("p", n) == "new" for n in range(5))
    assert all(passing.admit("p", n, f"c{n}", "loud", 0, pending=n, share=10) for n in range(5))
    assert passing.passed_over() == 0 and passing.lowest("p") is None


def test_at_its_share_the_flooding_tenant_is_passed_over_and_a_quiet_one_admitted() -> None:
    """At its share, a record of the tenant holding it all is passed over; one of a tenant
    holding nothing is admitted; the commit stays at the lowest passed-over offset."""
    passing: PassOver[str] = PassOver(100)
    for n in range(10):
        passing.seen("p", n)
        assert passing.admit("p", n, f"loud-{n}", "loud", 0, pending=n, share=10)
    passing.seen("p", 10)
    assert not passing.admit("p", 10, "loud-10", "loud", 0, pending=20, share=10)
    passing.seen("p", 11)
    assert passing.admit("p", 11, "quiet-0", "quiet", 0, pending=10, share=10)
    assert passing.lowest("p") == 10 and passing.passed_over("p") == 1


def test_a_conversation_behind_one_of_its_records_passed_over_is_passed_over_too() -> None:
    """Once a conversation has a record passed over, its later records are passed over too,
    whatever room there is, and read again in offset order: never reordered."""
    passing: PassOver[str] = PassOver(100)
    passing.seen("p", 0)
    assert not passing.admit("p", 0, "c", "loud", 0, pending=20, share=10)  # twice: full
    passing.seen("p", 1)
    assert not passing.admit("p", 1, "c", "loud", 0, pending=0, share=10)  # room, but behind
    assert passing.rewinds(["p"], lambda p: 0, 10) == {"p": 0}
    assert passing.seen("p", 1) == "passed"
    assert passing.readmit("p", 1, pending=0, share=10) is None  # 0 first
    assert passing.seen("p", 0) == "passed"
    assert passing.readmit("p", 0, pending=0, share=10) == "c"
    assert passing.readmit("p", 1, pending=1, share=10) == "c"
    assert passing.passed_over() == 0 and passing.lowest("p") is None


def test_the_bound_makes_a_full_partition_hold_and_pause_instead() -> None:
    """With ``max_records`` passed over, a full partition's next record is held (the partition
    then pauses, as without passing over), unless its conversation is behind one passed over."""
    passing: PassOver[str] = PassOver(2)
    for n in range(2):
        passing.seen("p", n)
        assert not passing.admit("p", n, f"c{n}", "loud", 0, pending=20, share=10)
    assert passing.full()
    passing.seen("p", 2)
    assert passing.admit("p", 2, "c2", "loud", 0, pending=20, share=10)
    passing.seen("p", 3)
    assert not passing.admit("p", 3, "c0", "loud", 0, pending=20, share=10)
    passing.forget(["p"])
    assert passing.passed_over() == 0 and not passing.full()


def test_tenants_are_learned_from_routes_and_bounded() -> None:
    tenants = Tenants(agents=2, conversations=2)
    assert tenants.of("c1", "a1") == "agent:a1" and tenants.of("c1", None) == ""
    tenants.learn("c1", "a1", "ws")
    assert tenants.of("c9", "a1") == "ws" and tenants.of("c1", None) == "ws"
    for n in range(3):
        tenants.learn(f"x{n}", f"b{n}", "other")
    assert tenants.of("c9", "a1") == "agent:a1"  # forgotten: least recently used


@dataclass
class Parsed:
    session_id: str
    agent_id: str | None


@dataclass
class Log:
    """A partition's records: (conversation, tenant) by offset."""

    records: list[tuple[str, str]]


@st.composite
def logs(draw: st.DrawFn) -> Log:
    loud = draw(st.integers(0, 120))
    quiet = draw(st.integers(0, 20))
    entries = [(f"loud-{draw(st.integers(0, 15))}", "loud") for _ in range(loud)]
    for _ in range(quiet):
        at = draw(st.integers(0, len(entries)))
        entries.insert(at, (f"quiet-{draw(st.integers(0, 3))}", "quiet"))
    return Log(entries)


@settings(max_examples=150, deadline=None)
@given(logs(), st.integers(2, 12), st.integers(0, 40), st.randoms(use_true_random=False))
def test_every_record_is_admitted_once_in_its_conversations_order(
    log: Log, limit: int, bound: int, rnd: random.Random
) -> None:
    """A partition read in rounds of a share, with records finished in any order (a
    conversation's one at a time, as its worker does) and seeks back whenever asked: every
    record is admitted exactly once, each conversation's in offset order, the commit never
    passes a record not finished, and what is held never exceeds twice the share."""
    marks: OffsetWatermarks[str] = OffsetWatermarks()
    look = LookAhead(marks, Backpressure(limit), bound)
    look.owned(1)
    share = limit
    position = 0
    admitted: list[int] = []
    held: dict[str, list[int]] = defaultdict(list)  # conversation -> admitted, unfinished
    finished: set[int] = set()
    for _ in range(20 * (len(log.records) + 5)):
        if len(finished) == len(log.records):
            break
        for _, offset in look.rewinds(["p"]).items():
            position = offset
        paused = look.pressure("p") >= share
        if not paused:
            for offset in range(position, min(position + share, len(log.records))):
                conversation, tenant = log.records[offset]
                seen = look.first_look("p", offset)
                if seen == "skip":
                    continue
                parsed = Parsed(conversation, tenant)
                if seen == "new" and not look.admit("p", offset, parsed, 0):
                    continue
                marks.track("p", offset, again=seen == "again")
                admitted.append(offset)
                held[conversation].append(offset)
            position = min(position + share, len(log.records))
        assert marks.pending_count("p") <= 2 * share + share  # one round past twice the share
        for conversation in list(held):
            if held[conversation] and rnd.random() < 0.5:
                offset = held[conversation].pop(0)
                marks.done("p", offset)
                look.done("p", offset)
                finished.add(offset)
        mark = look.committable("p")
        assert mark is None or all(o in finished for o in range(mark))
    assert sorted(admitted) == list(range(len(log.records))), "lost or admitted twice"
    by_conversation: dict[str, list[int]] = defaultdict(list)
    for offset in admitted:
        by_conversation[log.records[offset][0]].append(offset)
    assert all(v == sorted(v) for v in by_conversation.values()), "reordered"
    assert look.committable("p") == len(log.records) or not log.records


# --- one consumer ----------------------------------------------------------------------------


@pytest.fixture
def one() -> OneConsumer:
    return OneConsumer()


def flood_and_quiet(one: OneConsumer, loud: list[str], per: int, quiet: list[str]) -> None:
    for n in range(per):
        for session_id in loud:
            body = {"session_id": session_id, "message": f"t{n}", "id": f"m{n}",
                    "agent_id": "agent-flood"}
            one.consumer.append(PART, session_id.encode(), json.dumps(body).encode())
    for session_id in quiet:
        agent = f"agent-{session_id.split('-')[0]}"
        body = {"session_id": session_id, "message": "t0", "id": "m0", "agent_id": agent}
        one.consumer.append(PART, session_id.encode(), json.dumps(body).encode())


async def test_a_quiet_customer_behind_a_flood_ten_times_the_look_ahead_is_answered_at_once(
    one: OneConsumer,
) -> None:
    """2,000 inputs of one workspace, then one input each of three quiet customers of another
    and of a new customer of the flooding workspace, on one partition with a look-ahead of 200
    records: the four are read past the flood and answered while most of the flood still
    waits; the flood is read again as room frees, every input is answered once and in order,
    the partition is committed to its end, and the records held never exceed twice the
    look-ahead."""
    one.start(WorkspaceAgent(turn_s=0.005), max_in_flight=4, max_buffered_records=200,
              max_passed_over=5000)
    loud = [f"flood-{i}" for i in range(100)]
    quiet = [f"quiet-{i}" for i in range(3)] + ["flood-new"]  # and a new customer of the flood's
    flood_and_quiet(one, loud, 20, quiet)
    peak = 0
    assert one.service is not None
    marks = one.service.parts.commits.marks

    def quiet_answered() -> bool:
        nonlocal peak
        peak = max(peak, marks.pending_count())
        return all(any(k == s.encode() for _, k, _ in one.producer.sent) for s in quiet)

    async with one.running():
        await until(quiet_answered, "the quiet customers are answered", within=20)
        assert sum(1 for s in one.agent.order if s.startswith("flood")) < 400
        passing = one.service.parts.intake.lookahead.passing
        assert passing.passed_over() > 0  # most of the flood unread
        await until(lambda: quiet_answered() and one.committed() == 2004,
                    "every input is committed", within=60)
    assert peak <= 2 * 200
    assert one.consumer.seeks, "the flood was never read again"
    one.check(loud, 20)
    one.check(quiet, 1)
    assert one.service.parts.intake.lookahead.passing.passed_over() == 0



def test_passing_over_is_off_with_a_bound_of_zero() -> None:
    """``MAX_PASSED_OVER=0``: a full partition pauses at its share, as before."""
    marks: OffsetWatermarks[str] = OffsetWatermarks()
    look = LookAhead(marks, Backpressure(10), 0)
    for n in range(10):
        marks.track("p", n)
    assert look.pressure("p") == 10
    look.first_look("p", 10)
    assert look.admit("p", 10, Parsed("c", None), 0)
    with pytest.raises(ValueError):
        PassOver(-1)


def test_records_are_passed_over_without_being_parsed_again() -> None:
    """A re-read record held before is skipped (counted as read again), and a passed-over one
    that stays passed over is decided from what was kept, not from its bytes."""
    marks: OffsetWatermarks[str] = OffsetWatermarks()
    look = LookAhead(marks, Backpressure(2), 10)
    look.owned(1)
    parsed = Parsed("c", "a")
    for n in range(2):
        assert look.first_look("p", n) == "new" and look.admit("p", n, parsed, 0)
        marks.track("p", n)
    assert look.first_look("p", 2) == "new" and not look.admit("p", 2, parsed, 0)
    assert look.first_look("p", 0) == "skip" and look.passing.reread == 1
    assert look.first_look("p", 2) == "skip"  # full still: passed over once more
    before = metrics.REREAD_RECORDS._value.get()
    look.observe()
    assert look.passing.reread == 0 and metrics.REREAD_RECORDS._value.get() == before + 1
    assert metrics.PASSED_OVER_RECORDS._value.get() == 1


class PooledStore(FakeStore):
    """A store behind a pool of one connection, taken in arrival order (as a database pool
    hands them out), each load 2 ms: notes the order conversations were loaded in."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[str] = []
        self._pool = asyncio.Semaphore(1)

    async def load(self, session_id: str, **options: Any) -> Any:
        async with self._pool:
            await asyncio.sleep(0.002)
            self.loaded.append(session_id)
            return await super().load(session_id, **options)


async def test_a_quiet_customers_load_does_not_queue_behind_a_broadcasts_loads(
    one: OneConsumer,
) -> None:
    """Three hundred new conversations of one workspace (a broadcast's worth) are read at once
    and every one of them needs a load before its turn; a quiet workspace's customer written
    right after is loaded within a few loads of its record being read, not after the
    broadcast's (its loads wait for a permit in the fair queue, not on the pool in arrival
    order). Everything is answered once."""
    one.store = PooledStore()
    one.start(WorkspaceAgent(turn_s=0.001), max_in_flight=2)
    loud = [f"flood-{i}" for i in range(300)]
    flood_and_quiet(one, loud, 1, [])
    store = one.store
    assert isinstance(store, PooledStore)
    async with one.running():
        await until(lambda: len(store.loaded) >= 5, "the broadcast is loading")
        flood_and_quiet(one, [], 0, ["quiet-0"])
        assert one.service is not None
        queues = one.service.parts.workers.queues
        await until(lambda: queues.is_active("quiet-0"), "the quiet record is read")
        read_at = len(store.loaded)
        await until(lambda: one.committed() == 301, "every input is committed", within=30)
    assert store.loaded.index("quiet-0") - read_at <= 6, (read_at, store.loaded.index("quiet-0"))
    one.check(loud, 1)
    one.check(["quiet-0"], 1)
