"""Per-session queues of inputs in offset order.

A plain data structure, no I/O and no asyncio, so its invariants are tested directly. Inputs of
one session wait in offset order behind the one being processed; a session is *active* from its
first enqueue until its queue runs dry. Different sessions are independent, so a slow session
never holds up another one in the same partition. A worker may take the run of inputs waiting
right behind the one it took (``take_following``): the messages of a burst, answered as one turn.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["QueuedInput", "SessionQueues"]

P = TypeVar("P", bound=Hashable)
T = TypeVar("T")


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
