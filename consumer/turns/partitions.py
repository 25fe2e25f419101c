"""Per-session queues in offset order and per-partition offset watermarks.

Two plain data structures, no I/O and no asyncio, so their invariants are tested directly:

``OffsetWatermarks`` — each fetched offset is *pending* until it is *done* (applied, skipped or
dead-lettered). The committable offset of a partition is the lowest pending offset, or one past
the highest offset seen when nothing is pending: everything below it is done. It never moves
backwards, and forgetting a partition (revoked) drops its state. Its memory follows the pending
offsets, not the distance between the lowest pending one and the newest: one input stuck for
hours behind a stream of finished ones does not grow it.

``SessionQueues`` — inputs of one session wait in offset order behind the one being processed;
a session is *active* from its first enqueue until its queue runs dry. Different sessions are
independent, so a slow session never holds up another one in the same partition. A worker may
take the run of inputs waiting right behind the one it took (``take_following``): the messages
of a burst, answered as one turn.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["OffsetWatermarks", "QueuedInput", "SessionQueues"]

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


@dataclass(frozen=True)
class QueuedInput(Generic[P, T]):
    """One input waiting in its session's queue: where it came from and what it is."""

    session_id: str
    partition: P
    offset: int
    item: T


class SessionQueues(Generic[P, T]):
    """FIFO queues per session; at most one input per session is taken out at a time."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[QueuedInput[P, T]]] = {}
        self._active: set[str] = set()

    def enqueue(self, entry: QueuedInput[P, T]) -> bool:
        """Queue an input; True when its session was idle and now needs a worker."""
        self._queues.setdefault(entry.session_id, deque()).append(entry)
        if entry.session_id in self._active:
            return False
        self._active.add(entry.session_id)
        return True

    def take(self, session_id: str) -> QueuedInput[P, T] | None:
        """The session's next input, oldest first; None (and the session idle) when empty."""
        queue = self._queues.get(session_id)
        if queue:
            return queue.popleft()
        self._queues.pop(session_id, None)
        self._active.discard(session_id)
        return None

    def take_following(
        self, session_id: str, accept: Callable[[QueuedInput[P, T]], bool], limit: int
    ) -> list[QueuedInput[P, T]]:
        """Take, oldest first, the session's waiting inputs while ``accept`` holds, at most
        ``limit``: the rest of a burst behind the input just taken. The first input refused
        stops it, so inputs are still answered in offset order."""
        queue = self._queues.get(session_id)
        taken: list[QueuedInput[P, T]] = []
        while queue and len(taken) < limit and accept(queue[0]):
            taken.append(queue.popleft())
        return taken

    def drop_partitions(self, partitions: Iterable[P]) -> list[QueuedInput[P, T]]:
        """Remove the queued (not yet taken) inputs of these partitions; return them."""
        lost = set(partitions)
        dropped: list[QueuedInput[P, T]] = []
        for queue in self._queues.values():
            kept = [e for e in queue if e.partition not in lost]
            dropped.extend(e for e in queue if e.partition in lost)
            queue.clear()
            queue.extend(kept)
        return dropped

    def discard_session(self, session_id: str) -> list[QueuedInput[P, T]]:
        """Drop a session's queued inputs and mark it idle (its worker is gone)."""
        dropped = list(self._queues.pop(session_id, ()))
        self._active.discard(session_id)
        return dropped

    def is_active(self, session_id: str) -> bool:
        return session_id in self._active

    @property
    def active_sessions(self) -> int:
        return len(self._active)

    @property
    def queued(self) -> int:
        return sum(len(q) for q in self._queues.values())
