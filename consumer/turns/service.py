"""The consumer service: the aiokafka group loop around the pipeline, composed of its parts.

Fetched records are parsed; malformed ones go straight to the DLQ, valid ones join their
conversation's queue, and each conversation with work has one worker that takes its inputs in
offset order. At most ``max_in_flight`` engine turns run at a time, the freed slots shared fairly
across workspaces. Offsets are committed per partition up to the lowest one not done, so a slow
conversation holds back only its partition's commit, and only a partition that is far behind
stops being fetched. Each assignment of a partition is an epoch: a revoke drains, commits and
ends it, and work of an ended epoch can no longer publish or commit.

The parts, each in its own module, and where they meet:

- ``intake``: the fetch loop and the look-ahead (which partitions to pause, which records of a
  full partition to pass over and read again: ``consumer.turns.passing``); it hands each record
  to ``workers`` or, refused by the parser, to ``dead_lettering``;
- ``workers``: one task per conversation with queued inputs, taking bursts of messages together;
  each turn it takes is run by ``attempts``;
- ``attempts``: one turn attempted until it is done: the retries, the model's fallback answer,
  the DLQ; it takes its engine turn's slot from ``slots``;
- ``slots``: the fair load permits and turn slots with the plans' caps and weights, per-minute
  budgets and the provider's shared back-off;
- ``dead_lettering``: records to the DLQ once, in order, while their partition is owned;
- ``commits``: done offsets (never past a record passed over), commits bounded in time, the
  lag;
- ``ownership``: the partitions' epochs and the work running on each, for a revoke to drain;
- ``rebalance``: partitions taken on and given up (revoke, lost membership, shutdown);
- ``clients`` and ``runtime``: the clients opened at start, shared by the parts, and closed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka.structs import TopicPartition

from consumer.closing import close_quietly
from consumer.settings import Settings
from consumer.turns.attempts import TurnAttempts
from consumer.turns.backpressure import Backpressure
from consumer.turns.clients import close_runtime, open_runtime
from consumer.turns.commits import Commits
from consumer.turns.dead_lettering import DeadLettering
from consumer.turns.intake import Intake
from consumer.turns.ownership import Ownership
from consumer.turns.passing import LookAhead
from consumer.turns.pipeline import TurnAgent
from consumer.turns.rebalance import Handover, RebalanceListener
from consumer.turns.runtime import Runtime
from consumer.turns.slots import TurnSlots
from consumer.turns.tasks import SideTasks, cancel_tasks
from consumer.turns.watermarks import OffsetWatermarks
from consumer.turns.workers import SessionWorkers
from store import Store

__all__ = ["ConsumerService"]

log = logging.getLogger("turnflow.consumer")


class _PartName:
    """A name of the service standing for an attribute of one of its parts: the tests reach the
    parts' state and steps (and put doubles in place of the clients) by these names."""

    def __init__(self, part: str, name: str) -> None:
        self._part = part
        self._name = name

    def __get__(self, service: Any, owner: type | None = None) -> Any:
        if service is None:
            return self
        return getattr(getattr(service, self._part), self._name)

    def __set__(self, service: Any, value: Any) -> None:
        setattr(getattr(service, self._part), self._name, value)


class ConsumerService:
    """``turnflow consume``: run until ``stop()``; then drain, commit and close cleanly."""

    def __init__(
        self,
        settings: Settings,
        agent: TurnAgent | None,
        *,
        store: Store | None = None,
        run_relay: bool = True,
        client_id: str = "turnflow-consumer",
        metrics_exports: tuple[str, ...] = ("consume",),
    ) -> None:
        settings.require_servers(database=store is None)
        self._settings = settings
        self._agent = agent
        self._run_relay = run_relay
        self._client_id = client_id
        self._metrics_exports = metrics_exports
        # Each part is given the parts it uses, so the seams between them are its constructor's
        # parameters; the order is the order they depend on one another.
        runtime = self._runtime = Runtime(settings, store)
        ownership = self._ownership = Ownership()
        side_tasks = self._side = SideTasks()
        # The look-ahead: the unfinished records (``marks``), when a partition pauses
        # (``backpressure``) and the records a full partition passes over (``lookahead``).
        marks: OffsetWatermarks[TopicPartition] = OffsetWatermarks()
        backpressure: Backpressure[TopicPartition] = Backpressure(
            settings.max_buffered_records, settings.max_buffered_bytes
        )
        lookahead = LookAhead(marks, backpressure, settings.max_passed_over)
        commits = self._commits = Commits(runtime, ownership, marks, lookahead)
        slots = self._turn_slots = TurnSlots(runtime, ownership, side_tasks, lookahead)
        dead_lettering = self._dead_lettering = DeadLettering(runtime, ownership, commits)
        attempts = self._attempts = TurnAttempts(runtime, ownership, commits, slots, dead_lettering)
        workers = self._session_workers = SessionWorkers(runtime, attempts.process)
        self._intake = Intake(
            runtime, ownership, commits, workers, dead_lettering, side_tasks, backpressure,
            lookahead,
        )
        self._handover = Handover(
            runtime, ownership, commits, workers, backpressure, dead_lettering.refused,
            side_tasks, lookahead.passing,
        )
        self._ready = False
        self.started = asyncio.Event()

    @property
    def restart_wanted(self) -> bool:
        """The database failed over under this process: its caller starts it again, so it
        continues from the positions the promoted database holds."""
        return self._runtime.restart_wanted

    def stop(self) -> None:
        """Ask the service to shut down (safe from a signal handler)."""
        self._runtime.stopping.set()

    def ready(self) -> bool:
        """Consuming, not stopping, and the broker and the database answered just now."""
        trips = self._runtime.round_trips
        return (
            self._ready and not self._runtime.stopping.is_set()
            and trips is not None and trips.fresh()
        )

    @property
    def health_port(self) -> int | None:
        health = self._runtime.health
        return health.port if health is not None else None

    @property
    def assignment(self) -> set[TopicPartition]:
        return self._ownership.owned()

    def committed_offsets(self) -> dict[TopicPartition, int]:
        """The offsets this consumer committed for the partitions it owns now."""
        return dict(self._commits.committed)

    async def run(self) -> None:
        """Start, consume until ``stop()``, shut down cleanly."""
        try:
            await open_runtime(
                self._runtime, self._settings, self._agent,
                client_id=self._client_id, metrics_exports=self._metrics_exports,
                run_relay=self._run_relay, budgeted=self._turn_slots.budgeted,
                ready=self.ready, listener=RebalanceListener(self._handover),
            )
            self._ready = True
            self.started.set()
            log.info(
                "consumer ready",
                extra={"group_id": self._settings.group_id, "port": self.health_port},
            )
            await self._intake.fetch_loop()
        finally:
            self._ready = False
            await self._shutdown()

    async def _shutdown(self) -> None:
        runtime = self._runtime
        if runtime.round_trips is not None:
            await runtime.round_trips.stop()
        consumer = runtime.consumer
        if consumer is not None:
            owned = self._ownership.owned()
            if owned:
                await self._handover.release(owned, reason="shutdown")
            await close_quietly(consumer.stop(), "the consumer")
            runtime.consumer = None
        if runtime.positions is not None:
            await runtime.positions.close()
        # Work left running after the drain is fenced; stop it before closing the store.
        await cancel_tasks([*self._session_workers.tasks.values(), *self._side.tasks])
        await close_runtime(runtime)
        if self.started.is_set():
            log.info("consumer stopped")

    # -- the parts' clients, state and steps, by the names the tests use ----------------------

    _consumer = _PartName("_runtime", "consumer")
    _producer = _PartName("_runtime", "producer")
    _store = _PartName("_runtime", "store")
    _pipeline = _PartName("_runtime", "pipeline")
    _dead_letters = _PartName("_runtime", "dead_letters")
    _budget = _PartName("_runtime", "budget")
    _epochs = _PartName("_ownership", "epochs")
    _owns = _PartName("_ownership", "owns")
    _busy_on = _PartName("_ownership", "busy_on")
    _marks = _PartName("_commits", "marks")
    _commit = _PartName("_commits", "commit")
    _slots = _PartName("_turn_slots", "fair")
    _lookahead = _PartName("_intake", "lookahead")
    _queues = _PartName("_session_workers", "queues")
    _workers = _PartName("_session_workers", "tasks")
    _side_tasks = _PartName("_side", "tasks")
    _fetch_loop = _PartName("_intake", "fetch_loop")
    _accept = _PartName("_intake", "accept")
    _process = _PartName("_attempts", "process")
    _send_dead_letter = _PartName("_dead_lettering", "send")
    _on_assigned = _PartName("_handover", "assigned")
    _on_revoked = _PartName("_handover", "revoked")
    _release = _PartName("_handover", "release")
