"""Back-pressure per partition: hold back only the partition that is behind.

A session's inputs are applied one at a time, so a conversation that receives thousands of
inputs at once (a hot session) keeps its partition's records waiting for a long time. Pausing
the whole consumer when too many records wait would make every other conversation wait for the
hot one. Instead each owned partition gets a fair share of ``MAX_BUFFERED_RECORDS``: a partition
whose fetched-but-unfinished records reach its share is paused (no more fetching from it) and is
resumed once it is down to half its share; the other partitions keep being fetched at their
normal pace. Offsets and ordering are untouched: pausing only stops fetching, and a resumed
partition is fetched from where it stopped.

``MAX_BUFFERED_BYTES`` bounds the same look-ahead by the records' key and value bytes: a
partition pauses at whichever share it reaches first, and resumes once under half of both.

With one owned partition the share is the whole budget, as before: conversations of one
partition are held back together, since a partition is read in offset order. Memory stays
bounded: each partition holds at most its share plus one fetch round (``fetch_limit``).

No I/O and no asyncio here, so the rules are tested directly; the service applies the answer
with ``consumer.pause``/``consumer.resume``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Backpressure", "Moves"]

P = TypeVar("P", bound=Hashable)


@dataclass(frozen=True)
class Moves(Generic[P]):
    """What to change now: partitions to pause and partitions to resume."""

    pause: frozenset[P]
    resume: frozenset[P]


class Backpressure(Generic[P]):
    """Which owned partitions are paused, from each one's count of unfinished records."""

    def __init__(self, limit: int, byte_limit: int | None = None) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        if byte_limit is not None and byte_limit < 1:
            raise ValueError(f"byte_limit must be >= 1, got {byte_limit}")
        self._limit = limit
        self._byte_limit = byte_limit
        self._paused: set[P] = set()

    def share(self, owned: int) -> int:
        """The records one partition may hold when ``owned`` partitions share the budget."""
        return max(1, self._limit // max(1, owned))

    def fetch_limit(self, owned: int) -> int:
        """Records to take in one fetch round: one share, so no round overfills a partition by
        more than a share (a hot partition's round is then followed by its pause)."""
        return self.share(owned)

    def byte_share(self, owned: int) -> int | None:
        """The record bytes one partition may hold (None: no byte bound)."""
        if self._byte_limit is None:
            return None
        return max(1, self._byte_limit // max(1, owned))

    def update(
        self,
        owned: Collection[P],
        pending: Callable[[P], int],
        pending_bytes: Callable[[P], int] = lambda p: 0,
    ) -> Moves[P]:
        """Pause owned partitions at their share (of records, or of bytes, whichever comes
        first); resume paused ones once down to half of both."""
        share = self.share(len(owned))
        low = max(1, share // 2)
        byte_share = self.byte_share(len(owned))
        byte_low = None if byte_share is None else max(1, byte_share // 2)

        def full(p: P) -> bool:
            return pending(p) >= share or (
                byte_share is not None and pending_bytes(p) >= byte_share
            )

        def drained(p: P) -> bool:
            return pending(p) < low and (byte_low is None or pending_bytes(p) < byte_low)

        pause = frozenset(p for p in owned if p not in self._paused and full(p))
        resume = frozenset(p for p in self._paused if p in owned and drained(p))
        self._paused -= resume
        self._paused |= pause
        self._paused &= set(owned)
        return Moves(pause=pause, resume=resume)

    def forget(self, partitions: Iterable[P]) -> None:
        """Drop partitions that were revoked or newly assigned (the client starts them
        unpaused)."""
        self._paused.difference_update(partitions)

    @property
    def paused(self) -> frozenset[P]:
        return frozenset(self._paused)
