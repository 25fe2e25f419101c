"""Per-partition offset watermarks: which offsets of a partition are done and so may be committed.

A plain data structure, no I/O and no asyncio, so its invariants are tested directly. Each
fetched offset is *pending* until it is *done* (applied, skipped or dead-lettered). The
committable offset of a partition is the lowest pending offset, or one past the highest offset
seen when nothing is pending: everything below it is done. It never moves backwards, and
forgetting a partition (revoked) drops its state. Its memory follows the pending offsets, not the
distance between the lowest pending one and the newest: one input stuck for hours behind a
stream of finished ones does not grow it.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

__all__ = ["OffsetWatermarks"]

P = TypeVar("P", bound=Hashable)
T = TypeVar("T")

# Done offsets a partition's heap may hold beyond twice its pending ones before it is rebuilt.
_HEAP_SLACK = 64


class OffsetWatermarks(Generic[P]):
    """Which offsets of which partitions are done, and up to where each may be committed."""

    def __init__(self) -> None:
        # Pending offsets of each partition, with their records' sizes (the look-ahead's bytes).
        self._pending: dict[P, dict[int, int]] = {}
        self._bytes: dict[P, int] = {}
        self._heaps: dict[P, list[int]] = {}
        self._next: dict[P, int] = {}

    def track(self, partition: P, offset: int, size: int = 0, *, again: bool = False) -> None:
        """Record a fetched offset as pending, its record ``size`` bytes long. Re-tracking a
        known or older offset is ignored, unless ``again``: a record read before but not held
        then (``consumer.turns.passing``), so not done either."""
        if not again and offset < self._next.get(partition, -1) and offset not in self._pending.get(
            partition, ()
        ):
            # An offset below the high mark that is not pending was already done: a refetch.
            return
        pending = self._pending.setdefault(partition, {})
        if offset in pending:
            return
        pending[offset] = size
        self._bytes[partition] = self._bytes.get(partition, 0) + size
        heapq.heappush(self._heaps.setdefault(partition, []), offset)
        self._next[partition] = max(self._next.get(partition, 0), offset + 1)

    def done(self, partition: P, offset: int) -> None:
        """Mark an offset finished; unknown ones (revoked meanwhile) are ignored.

        A done offset leaves the heap only once it reaches the top, so while a low offset stays
        pending every later done one would stay too. When the done ones outnumber the pending
        ones (plus some slack) the heap is rebuilt from the pending set: the same lowest
        pending offset, so the same committable one, in memory bounded by what is pending,
        and at amortised constant cost per offset."""
        pending = self._pending.get(partition)
        if pending is None:
            return
        size = pending.pop(offset, None)
        if size:
            self._bytes[partition] -= size
        heap = self._heaps[partition]
        if len(heap) > 2 * len(pending) + _HEAP_SLACK:
            heap[:] = list(pending)
            heapq.heapify(heap)

    def committable(self, partition: P) -> int | None:
        """The offset to commit (the next one to read), or None when nothing was ever tracked."""
        if partition not in self._next:
            return None
        pending = self._pending[partition]
        heap = self._heaps[partition]
        while heap and heap[0] not in pending:
            heapq.heappop(heap)
        return heap[0] if heap else self._next[partition]

    def pending_count(self, partition: P | None = None) -> int:
        if partition is not None:
            return len(self._pending.get(partition, ()))
        return sum(len(p) for p in self._pending.values())

    def pending_bytes(self, partition: P | None = None) -> int:
        """Bytes of the pending records (as given to ``track``), of one partition or all."""
        if partition is not None:
            return self._bytes.get(partition, 0)
        return sum(self._bytes.values())

    def partitions(self) -> list[P]:
        return list(self._next)

    def forget(self, partitions: Iterable[P]) -> None:
        """Drop all state of partitions this consumer no longer owns."""
        for partition in partitions:
            self._pending.pop(partition, None)
            self._bytes.pop(partition, None)
            self._heaps.pop(partition, None)
            self._next.pop(partition, None)
