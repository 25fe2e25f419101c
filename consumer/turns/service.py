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

from aiokafka.structs import TopicPartition

from consumer.closing import close_quietly
from consumer.settings import Settings
from consumer.turns.attempts import TurnAttempts
from consumer.turns.backpressure import Backpressure
from consumer.turns.clients import Opened, close_opened, open_clients, start_consuming
from consumer.turns.commits import Commits
from consumer.turns.dead_lettering import DeadLettering
from consumer.turns.intake import Intake
from consumer.turns.ownership import Ownership
from consumer.turns.passing import LookAhead
from consumer.turns.pipeline import TurnAgent
from consumer.turns.rebalance import Handover, RebalanceListener
from consumer.turns.runtime import Clients, Runtime
from consumer.turns.slots import TurnSlots
from consumer.turns.tasks import SideTasks, cancel_tasks
from consumer.turns.watermarks import OffsetWatermarks
from consumer.turns.workers import SessionWorkers
from store import Store

__all__ = ["Clients", "ConsumerService", "Parts"]

log = logging.getLogger("turnflow.consumer")


class ConsumerService:
    """``turnflow consume``: run until ``stop()``; then drain, commit and close cleanly."""

    def __init__(
        self,
        settings: Settings,
        agent: TurnAgent | None,
        *,
        store: Store | None = None,
        clients: Clients | None = None,
        run_relay: bool = True,
        client_id: str = "turnflow-consumer",
        metrics_exports: tuple[str, ...] = ("consume",),
    ) -> None:
        """``clients``: the clients to run on, given instead of opened (a test's doubles); the
        parts are then built at once, and ``parts.intake.fetch_loop()`` runs the loop on them.
        Otherwise ``run()`` opens the clients (on ``store`` when given) and builds the parts."""
        settings.require_servers(database=store is None and clients is None)
        self.settings = settings
        self._agent = agent
        self._store = store
        self._run_relay = run_relay
        self._client_id = client_id
        self._metrics_exports = metrics_exports
        self._stopping = asyncio.Event()
        self._opened = Opened()
        self._parts = None if clients is None else Parts(settings, clients, self._stopping)
        self._ready = False
        self.started = asyncio.Event()

    @property
    def parts(self) -> Parts:
        """The service's parts, each holding its own state (what the tests look at)."""
        if self._parts is None:
            raise RuntimeError("the consume service has no parts before its clients are open: "
                               "run() it, or give it clients")
        return self._parts

    @property
    def restart_wanted(self) -> bool:
        """The database failed over under this process: its caller starts it again, so it
        continues from the positions the promoted database holds."""
        return self._parts is not None and self._parts.runtime.restart_wanted

    def stop(self) -> None:
        """Ask the service to shut down (safe from a signal handler)."""
        self._stopping.set()

    def ready(self) -> bool:
        """Consuming, not stopping, and the broker and the database answered just now."""
        trips = self._opened.round_trips
        return (
            self._ready and not self._stopping.is_set()
            and trips is not None and trips.fresh()
        )

    @property
    def health_port(self) -> int | None:
        health = self._opened.health
        return health.port if health is not None else None

    @property
    def assignment(self) -> set[TopicPartition]:
        return self._parts.ownership.owned() if self._parts is not None else set()

    def committed_offsets(self) -> dict[TopicPartition, int]:
        """The offsets this consumer committed for the partitions it owns now."""
        return dict(self._parts.commits.committed) if self._parts is not None else {}

    async def run(self) -> None:
        """Open the clients, build the parts, consume until ``stop()``, shut down cleanly."""
        try:
            if self._parts is None:
                clients = await open_clients(
                    self._opened, self.settings, self._agent, self._store,
                    client_id=self._client_id, metrics_exports=self._metrics_exports,
                    run_relay=self._run_relay, ready=self.ready,
                )
                self._parts = Parts(self.settings, clients, self._stopping)
                await start_consuming(
                    self._opened, self.settings, RebalanceListener(self._parts.handover)
                )
            self._ready = True
            self.started.set()
            log.info(
                "consumer ready",
                extra={"group_id": self.settings.group_id, "port": self.health_port},
            )
            await self.parts.intake.fetch_loop()
        finally:
            self._ready = False
            await self._shutdown()

    async def _shutdown(self) -> None:
        if self._opened.round_trips is not None:
            await self._opened.round_trips.stop()
        parts = self._parts
        if parts is not None:
            runtime = parts.runtime
            if not runtime.consumer_closed:
                owned = parts.ownership.owned()
                if owned:
                    await parts.handover.release(owned, reason="shutdown")
                await close_quietly(runtime.consumer.stop(), "the consumer")
                runtime.consumer_closed = True
            # Work left running after the drain is fenced; stop it before closing the store.
            await cancel_tasks([*parts.workers.tasks.values(), *parts.side_tasks.tasks])
        await close_opened(self._opened)
        if self.started.is_set():
            log.info("consumer stopped")


class Parts:
    """The consume service's parts, each given the parts it uses, so the seams between them are
    its constructor's parameters; the order is the order they depend on one another."""

    def __init__(self, settings: Settings, clients: Clients, stopping: asyncio.Event) -> None:
        runtime = self.runtime = Runtime(settings, clients, stopping)
        ownership = self.ownership = Ownership()
        side_tasks = self.side_tasks = SideTasks()
        # The look-ahead: the unfinished records (``marks``), when a partition pauses
        # (``backpressure``) and the records a full partition passes over (``lookahead``).
        marks: OffsetWatermarks[TopicPartition] = OffsetWatermarks()
        backpressure: Backpressure[TopicPartition] = Backpressure(
            settings.max_buffered_records, settings.max_buffered_bytes
        )
        lookahead = LookAhead(marks, backpressure, settings.max_passed_over)
        commits = self.commits = Commits(runtime, ownership, marks, lookahead)
        slots = self.slots = TurnSlots(runtime, ownership, side_tasks, lookahead)
        dead_lettering = self.dead_lettering = DeadLettering(runtime, ownership, commits)
        attempts = self.attempts = TurnAttempts(runtime, ownership, commits, slots, dead_lettering)
        workers = self.workers = SessionWorkers(runtime, attempts.process)
        self.intake = Intake(
            runtime, ownership, commits, workers, dead_lettering, side_tasks, backpressure,
            lookahead,
        )
        self.handover = Handover(
            runtime, ownership, commits, workers, backpressure, dead_lettering.refused,
            side_tasks, lookahead.passing,
        )
