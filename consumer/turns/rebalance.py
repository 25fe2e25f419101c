"""Rebalance hand-over: what happens to a partition when the group gives it to this consumer or
takes it away.

An assigned partition gets a fresh epoch (``ownership``) and starts with no done offsets. On a
revoke (and on stop), the service stops taking work from those partitions, lets in-flight turns
finish for up to ``drain_timeout_ms``, commits what is done, then ends the epoch: a turn still
running is not interrupted, but it can no longer publish or commit. Its saved rows stay for the
next owner (which replays the record, finds it applied and flushes the outbox) or for the relay.
When the group has already given the partitions away (this member's session timed out), there is
nothing to drain for and nothing may be committed: the epoch ends at once.
"""

from __future__ import annotations

import logging

from aiokafka import ConsumerRebalanceListener
from aiokafka.structs import TopicPartition

from consumer.dead_letters import RefusedRecords
from consumer.turns.backpressure import Backpressure
from consumer.turns.commits import Commits, final_commit_timeout_s
from consumer.turns.ownership import Ownership
from consumer.turns.passing import PassOver
from consumer.turns.runtime import Runtime
from consumer.turns.tasks import SideTasks
from consumer.turns.workers import SessionWorkers

__all__ = ["Handover", "RebalanceListener"]

log = logging.getLogger("turnflow.consumer")


class Handover:
    """Takes partitions on and gives them up, for the group's rebalances and the shutdown."""

    def __init__(
        self,
        runtime: Runtime,
        ownership: Ownership,
        commits: Commits,
        workers: SessionWorkers,
        backpressure: Backpressure[TopicPartition],
        refused: RefusedRecords,
        side_tasks: SideTasks,
        passing: PassOver[TopicPartition],
    ) -> None:
        self._runtime = runtime
        self._ownership = ownership
        self._commits = commits
        self._workers = workers
        self._backpressure = backpressure
        self._refused = refused
        self._side_tasks = side_tasks
        self._passing = passing  # the records passed over (``consumer.turns.passing``)

    async def seek_to_positions(self, assigned: set[TopicPartition]) -> None:
        """Start each assigned partition where the database says this group stands, not at
        Kafka's committed offset (``consumer.turns.positions``)."""
        positions = self._runtime.positions
        if positions is not None:
            await positions.start_assigned(self._runtime.consumer, assigned)

    def assigned(self, assigned: set[TopicPartition]) -> None:
        """New epochs for ``assigned``, each starting with nothing done or committed."""
        consumer = self._runtime.consumer
        for tp in assigned:
            epoch = self._ownership.begin(tp)
            self._commits.assigned(tp)
            self._refused.forget([tp])
            if consumer is not None:
                self._side_tasks.spawn(self._commits.note_start(consumer, tp, epoch))
        # A new assignment starts unpaused in the client; the next round pauses it if needed.
        self._backpressure.forget(assigned)
        self._passing.forget(assigned)
        log.info(
            "partitions assigned",
            extra={"partitions": sorted(tp.partition for tp in assigned)},
        )

    async def revoked(self, revoked: set[TopicPartition]) -> None:
        owned = revoked & self._ownership.owned()
        if not owned:
            return
        if self._membership_lost():
            # The group already gave these partitions away: fence at once, no drain, no commit.
            await self.release(owned, reason="lost", drain=False)
        else:
            await self.release(owned, reason="revoked")

    def _membership_lost(self) -> bool:
        """True when the group coordinator no longer knows this member (a session timeout).

        aiokafka resets the member's generation to -1 when a heartbeat, join or sync is
        answered with an unknown member or an illegal generation; it exposes no public flag,
        hence the attribute read. Any other shape reads as "not lost" (the safe drain path
        still fences at its end).
        """
        coordinator = getattr(self._runtime.consumer, "_coordinator", None)
        return getattr(coordinator, "generation", None) == -1

    async def release(
        self, partitions: set[TopicPartition], *, reason: str, drain: bool = True
    ) -> None:
        """Stop new work on the partitions, drain, commit what is done, end their epochs."""
        self._workers.drop_partitions(partitions)
        if drain:
            await self._ownership.drain(
                partitions, within_s=self._runtime.settings.drain_timeout_ms / 1000
            )
            await self._commits.commit(partitions)
            positions = self._runtime.positions
            if positions is not None:
                self._commits.note_positions(partitions)
                await positions.flush(partitions, within_s=final_commit_timeout_s())
        if self._runtime.positions is not None:
            self._runtime.positions.forget(partitions)
        abandoned = self._ownership.running(partitions)
        self._ownership.end(partitions)
        self._commits.released(partitions)
        self._backpressure.forget(partitions)
        self._passing.forget(partitions)
        self._runtime.pipeline.forget_partitions({(tp.topic, tp.partition) for tp in partitions})
        log.info(
            "partitions released",
            extra={"reason": reason, "partitions": sorted(tp.partition for tp in partitions),
                   "abandoned": abandoned},
        )


class RebalanceListener(ConsumerRebalanceListener):  # type: ignore[misc]  # untyped base class
    """aiokafka's rebalance callbacks, handed to ``Handover``."""

    def __init__(self, handover: Handover) -> None:
        self._handover = handover

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._handover.revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._handover.seek_to_positions(set(assigned))
        self._handover.assigned(set(assigned))
