"""Which partitions this consumer owns, under which epoch, and how much work runs on each.

Each assignment of a partition gets a fresh epoch; an input carries the epoch it was fetched
under and may publish, or release its offset, only while that epoch is current (``owns``). Ending
an epoch is how a revoke fences the work still running on the partition: that work is not
interrupted (cancelling a database write midway buys nothing), but it can no longer publish or
commit. The same check stops a zombie that lost its partitions without noticing from publishing
once the consumer learns of it.

Work on a partition is counted so that a revoke can let it finish first (``drain``). Only this
object changes the counts: the turn path calls ``work_began`` and ``work_ended`` (plain calls
where a context manager would cost every turn an allocation); everything else uses ``busy_on``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Iterable, Iterator

from aiokafka.structs import TopicPartition

__all__ = ["Ownership"]


class Ownership:
    """Owned partitions with their current epochs, and the work running on each."""

    def __init__(self) -> None:
        self.epochs: dict[TopicPartition, int] = {}
        self._epoch_counter = 0
        self._busy: Counter[TopicPartition] = Counter()
        # Set whenever work on a partition ends, for a drain to look again.
        self.busy_changed = asyncio.Event()

    def owns(self, tp: TopicPartition, epoch: int) -> bool:
        return self.epochs.get(tp) == epoch

    def owned(self) -> set[TopicPartition]:
        return set(self.epochs)

    def begin(self, tp: TopicPartition) -> int:
        """A new assignment of ``tp``: its new epoch."""
        self._epoch_counter += 1
        self.epochs[tp] = self._epoch_counter
        return self._epoch_counter

    def end(self, partitions: Iterable[TopicPartition]) -> None:
        """Fence every input fetched under the partitions' current epochs."""
        for tp in partitions:
            self.epochs.pop(tp, None)

    def running(self, partitions: Iterable[TopicPartition]) -> int:
        """Work still running on ``partitions``."""
        return sum(self._busy[tp] for tp in partitions)

    def work_began(self, tp: TopicPartition) -> None:
        """One more piece of work on ``tp`` for a revoke to wait for."""
        self._busy[tp] += 1

    def work_ended(self, tp: TopicPartition) -> None:
        """A piece of work on ``tp`` ended (or stepped aside to wait, uncounted meanwhile)."""
        self._busy[tp] -= 1
        self.busy_changed.set()

    @contextlib.contextmanager
    def busy_on(self, tp: TopicPartition) -> Iterator[None]:
        """Counts work on ``tp`` for a revoke to wait for (a plain context manager: entering
        it never waits, so it costs no await in every turn)."""
        self.work_began(tp)
        try:
            yield
        finally:
            self.work_ended(tp)

    async def drain(self, partitions: set[TopicPartition], *, within_s: float) -> None:
        """Wait until no work runs on ``partitions``, for at most ``within_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while any(self._busy[tp] for tp in partitions):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self.busy_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.busy_changed.wait(), timeout=remaining)
