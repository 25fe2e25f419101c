"""Offset watermarks and per-session queues."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from consumer.turns.session_queues import QueuedInput, SessionQueues
from consumer.turns.watermarks import OffsetWatermarks


def test_commit_waits_for_the_lowest_pending_offset() -> None:
    """Done offsets above a pending one are not committable until the pending one is done."""
    marks: OffsetWatermarks[int] = OffsetWatermarks()
    for offset in (10, 11, 12):
        marks.track(0, offset)
    marks.done(0, 11)
    marks.done(0, 12)
    assert marks.committable(0) == 10
    marks.done(0, 10)
    assert marks.committable(0) == 13


def test_partitions_are_independent() -> None:
    """A pending offset in one partition does not hold back another partition."""
    marks: OffsetWatermarks[str] = OffsetWatermarks()
    marks.track("a", 0)
    marks.track("b", 5)
    marks.done("b", 5)
    assert (marks.committable("a"), marks.committable("b")) == (0, 6)


def test_untracked_partition_has_nothing_to_commit() -> None:
    """A partition never fetched from yields None, not offset zero."""
    assert OffsetWatermarks[int]().committable(3) is None


def test_forgotten_partition_drops_its_state() -> None:
    """After a revoke, late completions of that partition are ignored."""
    marks: OffsetWatermarks[int] = OffsetWatermarks()
    marks.track(0, 1)
    marks.forget([0])
    marks.done(0, 1)
    assert marks.committable(0) is None
    assert marks.pending_count() == 0


def test_refetched_done_offset_is_not_pending_again() -> None:
    """Tracking an offset already done (a refetch) does not hold the watermark back."""
    marks: OffsetWatermarks[int] = OffsetWatermarks()
    marks.track(0, 1)
    marks.track(0, 2)
    marks.done(0, 1)
    marks.track(0, 1)
    marks.done(0, 2)
    assert marks.committable(0) == 3


@given(st.lists(st.integers(min_value=0, max_value=50), unique=True, min_size=1),
       st.randoms(use_true_random=False))
def test_watermark_is_the_lowest_undone_offset(offsets: list[int], rnd) -> None:
    """Whatever order offsets finish in, the watermark is the first unfinished tracked offset
    and never moves backwards."""
    offsets.sort()
    marks: OffsetWatermarks[int] = OffsetWatermarks()
    for offset in offsets:
        marks.track(0, offset)
    order = offsets[:]
    rnd.shuffle(order)
    finished: set[int] = set()
    previous = -1
    for offset in order:
        marks.done(0, offset)
        finished.add(offset)
        undone = [o for o in offsets if o not in finished]
        expected = undone[0] if undone else offsets[-1] + 1
        mark = marks.committable(0)
        assert mark == expected
        assert mark is not None and mark >= previous
        previous = mark


def entry(session: str, offset: int, partition: int = 0) -> QueuedInput[int, str]:
    return QueuedInput(session, partition, offset, f"{session}@{offset}")


def test_session_inputs_come_out_in_order() -> None:
    """One session's inputs are taken oldest first; only the first enqueue asks for a worker."""
    queues: SessionQueues[int, str] = SessionQueues()
    assert queues.enqueue(entry("s1", 1)) is True
    assert queues.enqueue(entry("s1", 2)) is False
    assert [queues.take("s1").offset, queues.take("s1").offset] == [1, 2]  # type: ignore[union-attr]
    assert queues.take("s1") is None
    assert not queues.is_active("s1")


def test_sessions_are_independent() -> None:
    """A second session in the same partition gets its own worker while the first is busy."""
    queues: SessionQueues[int, str] = SessionQueues()
    queues.enqueue(entry("slow", 1))
    assert queues.take("slow") is not None  # being processed, still active
    assert queues.enqueue(entry("fast", 2)) is True
    assert queues.enqueue(entry("slow", 3)) is False
    assert queues.active_sessions == 2


def test_idle_session_needs_a_new_worker() -> None:
    """After a session's queue ran dry, its next input asks for a worker again."""
    queues: SessionQueues[int, str] = SessionQueues()
    queues.enqueue(entry("s1", 1))
    queues.take("s1")
    assert queues.take("s1") is None
    assert queues.enqueue(entry("s1", 2)) is True


def test_dropping_a_partition_removes_only_its_queued_inputs() -> None:
    """Revoking a partition drops its waiting inputs and keeps the other partition's."""
    queues: SessionQueues[int, str] = SessionQueues()
    queues.enqueue(entry("s1", 1, partition=0))
    queues.enqueue(entry("s1", 2, partition=0))
    queues.enqueue(entry("s2", 1, partition=1))
    dropped = queues.drop_partitions([0])
    assert sorted(e.offset for e in dropped) == [1, 2]
    assert queues.queued == 1
    assert queues.take("s1") is None


def test_one_stuck_offset_does_not_grow_memory_with_later_done_ones() -> None:
    """A low offset pending for long while thousands of later ones finish: the watermark stays
    on it, and what is kept is bounded by the pending offsets, not by the stream behind it."""
    marks: OffsetWatermarks[int] = OffsetWatermarks()
    marks.track(0, 0)
    for offset in range(1, 20_001):
        marks.track(0, offset)
        marks.done(0, offset)
        assert len(marks._heaps[0]) <= 2 * marks.pending_count(0) + 64 + 1
    assert marks.committable(0) == 0
    assert marks.pending_count(0) == 1
    marks.done(0, 0)
    assert marks.committable(0) == 20_001


@given(st.integers(min_value=200, max_value=400), st.integers(min_value=0, max_value=2**32))
def test_watermark_holds_when_the_heap_is_rebuilt(count: int, seed: int) -> None:
    """Offsets (with gaps) tracked and finished interleaved, in any order, the first one stuck,
    enough of them that the heap is rebuilt: the watermark is still the first unfinished
    tracked offset, and the heap stays bounded by the pending offsets."""
    rnd = random.Random(seed)
    marks: OffsetWatermarks[int] = OffsetWatermarks()
    first = offset = rnd.randrange(5)
    undone: set[int] = set()
    finishable: list[int] = []  # undone, the first (stuck) one aside
    for _ in range(count):
        marks.track(0, offset)
        undone.add(offset)
        if offset != first:
            finishable.append(offset)
        if finishable and rnd.random() < 0.7:
            i = rnd.randrange(len(finishable))
            finishable[i], finishable[-1] = finishable[-1], finishable[i]
            done = finishable.pop()
            marks.done(0, done)
            undone.discard(done)
        assert len(marks._heaps[0]) <= 2 * marks.pending_count(0) + 64 + 1
        assert marks.committable(0) == first
        last = offset
        offset += rnd.randrange(1, 4)
    rest = sorted(undone)
    rnd.shuffle(rest)
    for done in rest:
        marks.done(0, done)
        undone.discard(done)
        assert marks.committable(0) == (min(undone) if undone else last + 1)
