"""Commit watermarks: which offsets are done, committing them in bounded time, and the lag.

Offsets are committed per partition up to the watermark of ``OffsetWatermarks`` (the lowest
offset not yet done), so a slow conversation holds back only its partition's commit, never
other conversations' work. An offset is marked done only while the epoch its input was fetched
under is current (``ownership``).

Broker trouble. The fetch loop waits for a commit a quarter of a second at most, then goes on
beside it (``consumer.turns.intake``), so a coordinator out of reach holds back only the
commits. A commit waits at most ``session_timeout_ms`` (the last one at shutdown a few
seconds, and the fetch loop's only until ``stop()``): aiokafka would otherwise wait for an
unreachable group coordinator for as long as the consumer is open, and it is closed only after
that commit. A commit given up is a failed commit: its offsets are sent again with the next one,
and until then a restart replays them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from consumer import metrics
from consumer.turns import crash
from consumer.turns.ownership import Ownership
from consumer.turns.passing import LookAhead
from consumer.turns.runtime import Runtime
from consumer.turns.watermarks import OffsetWatermarks

__all__ = ["Commits", "bounded"]

log = logging.getLogger("turnflow.consumer")

# The last commit at shutdown, after the drain: short, so ``consumer.stop()`` is always reached
# (a commit not made in time only means more replays after the restart).
_FINAL_COMMIT_TIMEOUT_S = 5.0


def final_commit_timeout_s() -> float:
    """How long the last commit of a partition given up may take (read when used)."""
    return _FINAL_COMMIT_TIMEOUT_S


class Commits:
    """The done offsets of the owned partitions, what was committed of them, and where each
    partition's fetching started (the lag's base until its first commit)."""

    def __init__(
        self,
        runtime: Runtime,
        ownership: Ownership,
        marks: OffsetWatermarks[TopicPartition],
        lookahead: LookAhead[TopicPartition],
    ) -> None:
        self._runtime = runtime
        self._ownership = ownership
        self.marks = marks
        # Records passed over are not done: no commit (or position) moves past them.
        self._lookahead = lookahead
        self.committed: dict[TopicPartition, int] = {}
        self.starts: dict[TopicPartition, int] = {}

    def done(self, tp: TopicPartition, offset: int, epoch: int) -> None:
        """The input at ``offset`` is finished; its offset may be committed if the epoch it was
        fetched under is still current."""
        if self._ownership.owns(tp, epoch):
            self.marks.done(tp, offset)
            self._lookahead.done(tp, offset)

    def assigned(self, tp: TopicPartition) -> None:
        """A new assignment of ``tp`` starts with no done offsets and nothing committed."""
        self.marks.forget([tp])
        self.committed.pop(tp, None)
        self.starts.pop(tp, None)

    def released(self, partitions: Iterable[TopicPartition]) -> None:
        """``partitions`` are no longer owned: their offsets and lag series are dropped."""
        partitions = list(partitions)
        for tp in partitions:
            self.committed.pop(tp, None)
            self.starts.pop(tp, None)
            with contextlib.suppress(KeyError):
                metrics.CONSUMER_LAG.remove(tp.topic, str(tp.partition))
        self.marks.forget(partitions)

    async def commit(self, partitions: set[TopicPartition], *, until_stop: bool = False) -> None:
        """Commit the done offsets of ``partitions``, waiting a bounded time.

        aiokafka's commit retries a broker error and waits for the group coordinator with no
        limit while the consumer is open, so a coordinator out of reach would hold the fetch
        loop, a revoke and the shutdown (which closes the consumer only after this). A commit
        is therefore given up after ``session_timeout_ms`` (a coordinator out of reach that
        long has moved the partitions anyway; a revoke's drain and commit fit in the rebalance
        timeout, ``session_timeout_ms + drain_timeout_ms``), after
        ``_FINAL_COMMIT_TIMEOUT_S`` once the service is stopping and, with ``until_stop``, as
        soon as ``stop()`` is called. Given up, it is a failed commit: the offsets stay marked
        and the next commit includes them; only done offsets are ever sent, so a commit that
        lands late (aiokafka shields the request in flight) or never only means replays.
        """
        if self._runtime.consumer_closed:
            return
        consumer = self._runtime.consumer
        offsets = self.due(partitions)
        if not offsets:
            return
        crash.reached("before_commit")
        stopping = self._runtime.stopping
        stopped = stopping.is_set()
        within_s = self._runtime.settings.session_timeout_ms / 1000
        if stopped:
            within_s = min(within_s, _FINAL_COMMIT_TIMEOUT_S)
        try:
            made = await bounded(
                consumer.commit(offsets), within_s,
                stop=stopping if until_stop and not stopped else None,
            )
        except KafkaError as exc:
            # A rebalance in progress refuses commits; the revoke path commits again.
            log.warning("offset commit failed", extra={"error": type(exc).__name__})
            return
        if not made:
            log.warning(
                "offset commit given up; the offsets are committed later",
                extra={"timeout_s": within_s, "stopping": stopping.is_set()},
            )
            return
        # Commits may overlap (the fetch loop's runs beside a revoke's): an older one finishing
        # last must not move the record back, nor bring back a partition released meanwhile.
        for tp, offset in offsets.items():
            if tp in self._ownership.epochs and offset > self.committed.get(tp, -1):
                self.committed[tp] = offset

    def due(self, partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        """The offsets of ``partitions`` done since their last commit: what a commit sends."""
        offsets: dict[TopicPartition, int] = {}
        for tp in partitions:
            mark = self._lookahead.committable(tp)
            if mark is not None and mark > self.committed.get(tp, -1):
                offsets[tp] = mark
        return offsets

    def note_positions(self, partitions: set[TopicPartition]) -> None:
        """Hand the watermarks to the database's positions; stop for a restart when the
        database failed over under this process (``consumer.turns.positions``)."""
        runtime = self._runtime
        positions = runtime.positions
        if positions is None:
            return
        positions.note({tp: self._lookahead.committable(tp) for tp in partitions})
        if positions.database_changed and not runtime.restart_wanted:
            log.error("the database failed over to a new timeline; restarting to continue "
                      "from the positions it holds")
            runtime.restart_wanted = True
            runtime.stopping.set()

    def observe_lag(self, consumer: AIOKafkaConsumer) -> None:
        """Lag of every owned partition, quiet ones included: from the offset this consumer
        committed, else from where it started fetching after the assignment."""
        for tp in self._ownership.epochs:
            end = consumer.highwater(tp)
            mark = self.committed.get(tp, self.starts.get(tp))
            if end is not None and mark is not None:
                metrics.CONSUMER_LAG.labels(topic=tp.topic, partition=str(tp.partition)).set(
                    max(0, end - mark)
                )

    async def note_start(self, consumer: AIOKafkaConsumer, tp: TopicPartition, epoch: int) -> None:
        """Remember where fetching starts on a new assignment, the lag's base until the first
        commit (a quiet partition may never have one)."""
        with contextlib.suppress(KafkaError):  # IllegalStateError: no longer assigned
            position = await consumer.position(tp)
            if self._ownership.owns(tp, epoch):
                self.starts[tp] = position


async def bounded(work: Awaitable[None], within_s: float, *, stop: asyncio.Event | None) -> bool:
    """Await ``work`` for at most ``within_s`` (and, with ``stop``, only until it is set);
    False when it was given up, and then it has been cancelled. Its own errors are raised; a
    cancellation of the caller still propagates."""
    task = asyncio.ensure_future(work)
    waiters: set[asyncio.Future[Any]] = {task}
    stopped = asyncio.ensure_future(stop.wait()) if stop is not None else None
    if stopped is not None:
        waiters.add(stopped)
    try:
        await asyncio.wait(waiters, timeout=within_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if stopped is not None:
            stopped.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait([task])
    if task.cancelled():
        return False
    task.result()
    return True
