"""Back-pressure per partition: hold back only the partition that is behind.

A session's inputs are applied one at a time, so a conversation that receives thousands of
inputs at once (a hot session) keeps its partition's records waiting for a long time. Pausing
the whole consumer when too many records wait would make every other conversation wait for the
hot one. Instead each owned partition gets a fair share of ``MAX_BUFFERED_RECORDS``: a partition
whose fetched-but-unfinished records reach its share is paused (no more fetching from it) and is
resumed once it is down to half its share; the other partitions keep being fetched at their
normal pace. Offsets and ordering are untouched: pausing only stops fetching, and a resumed
partition is fetched from where it stopped.

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

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self._limit = limit
        self._paused: set[P] = set()

    def share(self, owned: int) -> int:
        """The records one partition may hold when ``owned`` partitions share the budget."""
        return max(1, self._limit // max(1, owned))

    def fetch_limit(self, owned: int) -> int:
        """Records to take in one fetch round: one share, so no round overfills a partition by
        more than a share (a hot partition's round is then followed by its pause)."""
        return self.share(owned)

    def update(self, owned: Collection[P], pending: Callable[[P], int]) -> Moves[P]:
        """Pause owned partitions at their share; resume paused ones down to half of it."""
        share = self.share(len(owned))
        low = max(1, share // 2)
        pause = frozenset(p for p in owned if p not in self._paused and pending(p) >= share)
        resume = frozenset(p for p in self._paused if p in owned and pending(p) < low)
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
