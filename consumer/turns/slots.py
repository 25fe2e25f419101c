"""Turn slots: when a loaded turn may run its engine turn, and which waiting turn runs next.

At most ``max_in_flight`` engine turns run at a time. A freed slot goes to the waiting turn the
weighted fair queue across workspaces picks (``consumer.turns.fairness``: plans' weights and
caps); before it queues, a turn also waits for its plan's per-minute budget
(``store.model_budget``, shared by every consumer; a consumer takes a busy workspace's turns from
it a few at a time, ``MinuteLease``) and for the model provider's shared back-off
after a rate-limit answer (``consumer.turns.model_backoff``). The turn holds no slot while it
waits for either. Loads are queued fairly too (``TurnSlots.load``): before its load, a turn waits
for one of as many load permits as the store pools connections, so one workspace's thousands of
new conversations do not hold the database pool while another's one waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from typing import Any

from aiokafka.structs import TopicPartition

from consumer import metrics
from consumer.hosting.routing import Route
from consumer.turns.fairness import FairSlots, lane_of
from consumer.turns.model_backoff import SharedBackoff
from consumer.turns.ownership import Ownership
from consumer.turns.passing import LookAhead
from consumer.turns.pipeline import Admission, TurnWork
from consumer.turns.runtime import Runtime
from consumer.turns.tasks import SideTasks

__all__ = ["MinuteLease", "Slot", "TurnSlots"]

log = logging.getLogger("turnflow.consumer")

LEASE_S = 0.25
"""How long the turns one take of the per-minute budget counts at once should last: as many as
the workspace's turns ran on this consumer in that time (``MinuteLease``)."""
LEASE_MAX = 64
"""The most turns one take counts at once."""
LEASE_SHARE = 20
"""One take counts at most this fraction of the cap (``per_minute // LEASE_SHARE``)."""


class MinuteLease:
    """Turns this consumer took from a workspace's per-minute budget and has not run yet.

    A workspace that runs many turns on one consumer would otherwise cost one statement per
    turn against one row of ``workspace_model_minutes`` (every consumer's turns of that
    workspace updating the same row). Instead a take counts as many turns as the workspace ran
    here in the last ``LEASE_S`` (the first take one; at most ``LEASE_MAX``, and at most a
    ``LEASE_SHARE``-th of the cap), all of them or none; the next turns run on them without
    asking the database. The count still never passes the cap across consumers (each take is
    atomic and whole). What a lease has left when the database's minute ends stays counted and
    unused, as a turn taken and then not run does: at most a ``LEASE_SHARE``-th of the cap per
    consumer, and about ``LEASE_S`` of its turns at most at the workspace's own pace."""

    __slots__ = ("left", "size", "taken_at", "until")

    def __init__(self, size: int, taken_at: float, until: float) -> None:
        self.size = size  # how many the last take counted
        self.left = size - 1  # the turn that took it runs on one
        self.taken_at = taken_at  # the event loop's clock
        self.until = until  # the end of the database's minute, on the event loop's clock

    def use(self, now: float) -> bool:
        """Run one turn on the lease: False when it has none left in this minute."""
        if self.left <= 0 or now >= self.until:
            return False
        self.left -= 1
        return True

    def wanted(self, now: float, per_minute: int) -> int:
        """How many the next take asks for: the pace at which this lease was used up."""
        elapsed = max(now - self.taken_at, 1e-3)
        pace = self.size / elapsed  # turns a second, this workspace on this consumer
        return max(1, min(LEASE_MAX, per_minute // LEASE_SHARE, int(pace * LEASE_S)))



class Slot:
    """One of the ``max_in_flight`` turn slots, held for the engine turn alone: taken after the
    input's load (the pipeline's ``before_turn``), given back when the engine turn returns or
    raises (``after_turn``) or, at the latest, when the attempt ends. The load before and the
    save, publish and mark after are database and broker round trips that need no model call,
    so they do not hold a slot another session's turn could use. The session's worker still
    takes its inputs one at a time, load to publish, so a session's order is unchanged; what
    waits loaded for a slot, or for its save, is bounded by the sessions with queued inputs
    (``max_buffered_records``). A turn rerun after a version conflict takes a slot again."""

    def __init__(self, slots: FairSlots) -> None:
        self._slots = slots
        self._held: str | None = None
        self._loading: tuple[FairSlots, str] | None = None

    async def load(self, loads: FairSlots, tenant: str, conversation: str, lane: str) -> None:
        """Wait for a turn to load: loads go by the fair queue too, so one workspace's thousands
        of new conversations do not queue on the database pool ahead of another's one."""
        await loads.take(tenant, conversation=conversation, lane=lane)
        self._loading = (loads, tenant)

    def loaded(self) -> None:
        """The load is over (the turn waits for its slot, or the attempt ended)."""
        if self._loading is not None:
            (loads, tenant), self._loading = self._loading, None
            loads.give_back(tenant)

    async def take(
        self, tenant: str, *, weight: float, cap: int | None, conversation: str, lane: str
    ) -> None:
        """Wait for a slot as a turn of ``conversation`` in workspace ``tenant``
        (``consumer.turns.fairness``: lanes take turns, the least served conversation first)."""
        self.loaded()
        await self._slots.take(tenant, weight=weight, cap=cap, conversation=conversation,
                               lane=lane)
        self._held = tenant
        metrics.IN_FLIGHT.inc()

    def give_back(self) -> None:
        self.loaded()
        if self._held is not None:
            tenant, self._held = self._held, None
            metrics.IN_FLIGHT.dec()
            self._slots.give_back(tenant)


class TurnSlots:
    """The fair slots with the plans' limits, the per-minute budgets and the provider's
    back-off in front of them."""

    def __init__(
        self,
        runtime: Runtime,
        ownership: Ownership,
        side_tasks: SideTasks,
        lookahead: LookAhead[TopicPartition],
    ) -> None:
        settings = runtime.settings
        self._runtime = runtime
        self._ownership = ownership
        self._side_tasks = side_tasks
        self._lookahead = lookahead
        self.fair = FairSlots(settings.max_in_flight)
        self.loads = FairSlots(min(settings.max_in_flight, 20))  # as many as pooled connections
        self._plan_weights = settings.plan_weight_map()
        self._plan_caps = settings.plan_cap_map()
        self._plan_per_minute = settings.plan_per_minute_map()
        # Workspaces whose per-minute budget ran out, until when (the event loop's clock): their
        # other turns wait for that without asking the database again.
        self._budget_closed: dict[str, float] = {}
        # Turns taken from a workspace's per-minute budget and not run yet (MinuteLease).
        self._leases: dict[str, MinuteLease] = {}
        self._taking: dict[str, asyncio.Lock] = {}  # the take under way, per workspace
        self._backoff = SharedBackoff(
            first_delay_s=settings.retry_backoff_ms / 1000,
            max_s=settings.retry_backoff_max_ms / 1000,
        )
        self._backoff_timer: asyncio.TimerHandle | None = None
        # Plan label values: the plans the settings name, and default (bounded, not per workspace).
        self._plan_labels = {
            "default", *self._plan_weights, *self._plan_caps, *self._plan_per_minute
        }
        for label in (*self._plan_labels, "other", "none"):  # every series from the start, at 0
            for family in (metrics.TURNS_WAITING, metrics.SLOT_WAIT, metrics.PLAN_CAP_WAITS,
                           metrics.PLAN_MINUTE_WAITS):
                family.labels(plan=label)

    def slot(self) -> Slot:
        """A slot for one attempt of a turn, not yet taken."""
        return Slot(self.fair)

    async def load(self, slot: Slot, work: TurnWork) -> None:
        """Wait for ``work``'s turn to load, in the fair queue of loads as one of its workspace's
        as far as known before the load (``consumer.turns.passing.Tenants``)."""
        await slot.load(self.loads, *self._lookahead.guess(work.parsed))

    async def take(
        self, slot: Slot, tp: TopicPartition, epoch: int, work: TurnWork, route: Route
    ) -> Admission:
        """The pipeline's ``before_turn``: wait for a turn slot, then say whether the input
        may still run. Loaded and waiting, it is not work on ``tp`` (inside the count its
        caller holds, uncounted meanwhile), so a revoke drains the turns that run without
        waiting for this one, which then finds itself fenced.

        The slot is the fair queue's (``consumer.turns.fairness``): the turn waits as one of its
        workspace's (``""`` without one), weighted and capped by the workspace's plan. A wait
        of a millisecond or more is part of the answer (``Admission.queued``), for ``turnflow
        inspect`` to show with the turn."""
        slot.loaded()  # loaded: a plan's budget or the back-off must not hold up others' loads
        tenant = route.workspace or ""
        self._lookahead.tenants.learn(work.parsed.session_id, work.parsed.agent_id, route.workspace)
        plan = route.plan or "default"
        # A turn of no workspace (``AGENT``) has no plan: no weight, no cap, no budget.
        cap = self._plan_caps.get(plan) if route.workspace is not None else None
        weight = self._plan_weights.get(plan, 1.0) if route.workspace is not None else 1.0
        label = "none" if route.workspace is None else (
            plan if plan in self._plan_labels else "other"
        )
        why: list[str] = []
        if self.fair.at_cap(tenant, cap):
            metrics.child(metrics.PLAN_CAP_WAITS, label).inc()
            why.append("plan-cap")
        waiting = metrics.child(metrics.TURNS_WAITING, label)
        ownership = self._ownership
        ownership.work_ended(tp)
        waiting.inc()
        started = time.perf_counter()
        queued: dict[str, Any] | None = None
        try:
            per_minute = self._plan_per_minute.get(plan)
            if per_minute is not None and route.workspace is not None:
                if await self._minute_budget(route.workspace, per_minute, label):
                    why.append("minute-budget")
            if self._backoff.remaining(asyncio.get_running_loop().time()) > 0:
                why.append("model-backoff")
                await self._provider_backoff()
            await slot.take(tenant, weight=weight, cap=cap,
                            conversation=work.parsed.session_id, lane=lane_of(work.parsed))
        finally:
            waiting.dec()
            waited = time.perf_counter() - started
            metrics.child(metrics.SLOT_WAIT, label).observe(waited)
            if waited >= 0.001:
                queued = {"waited_ms": int(waited * 1000), "plan": label, "why": why or ["slots"]}
            ownership.work_began(tp)
        return Admission(ownership.owns(tp, epoch), queued)

    async def _minute_budget(self, workspace: str, per_minute: int, label: str) -> bool:
        """Take one turn from the workspace's budget for this minute, shared by every consumer
        (``store.model_budget``), waiting for the next minute as long as it is spent. The turn
        holds no slot meanwhile. The database failing to answer lets the turn go: a cap that
        stops every turn of a workspace while the database is away would be an outage. True
        when the spent budget made the turn wait."""
        runtime = self._runtime
        budget = runtime.budget
        assert budget is not None, "a plan with a per-minute budget needs Clients.budget"
        loop = asyncio.get_running_loop()
        lease = self._leases.get(workspace)
        if lease is not None and lease.use(loop.time()):
            return False
        # One take at a time per workspace: the turns that find the lease empty meanwhile run
        # on what that take counts rather than each asking the database.
        taking = self._taking.get(workspace)
        if taking is None:
            taking = self._taking[workspace] = asyncio.Lock()
        closed_before = self._budget_closed.get(workspace)
        async with taking:
            # The budget was spent while this turn waited for the take before it: it waited
            # for the next minute too.
            waited = self._budget_closed.get(workspace) != closed_before
            if waited:
                metrics.child(metrics.PLAN_MINUTE_WAITS, label).inc()
            lease = self._leases.get(workspace)
            if lease is not None and lease.use(loop.time()):
                return waited
            return await self._take_minute(workspace, per_minute, label, lease, waited)

    async def _take_minute(
        self, workspace: str, per_minute: int, label: str, lease: MinuteLease | None,
        counted: bool,
    ) -> bool:
        """Take from the workspace's budget for this minute (``_minute_budget``), the lease's
        pace of turns at once; True when the spent budget made the turn wait (``counted``:
        it did already, and its wait is counted)."""
        runtime = self._runtime
        budget = runtime.budget
        assert budget is not None
        loop = asyncio.get_running_loop()
        while not runtime.stopping.is_set():
            closed_until = self._budget_closed.get(workspace, 0.0)
            if loop.time() < closed_until:
                await runtime.sleep(closed_until - loop.time())
                continue
            asked = loop.time()
            wanted = 1 if lease is None else lease.wanted(asked, per_minute)
            try:
                taken, left_s = await budget.take_many(workspace, per_minute, wanted)
                if not taken and wanted > 1:  # near the cap: what still fits, one at a time
                    wanted = 1
                    taken, left_s = await budget.take_many(workspace, per_minute, 1)
            except Exception as exc:
                log.warning("the per-minute budget could not be read; the turn goes on",
                            extra={"error": type(exc).__name__})
                return counted
            if random.random() < 0.001:  # the counts of minutes long gone, now and then
                self._side_tasks.spawn(self._prune_budget())
            if taken:
                self._keep_lease(workspace, taken, asked, loop.time() + left_s)
                return counted
            if not counted:
                counted = True
                metrics.child(metrics.PLAN_MINUTE_WAITS, label).inc()
            # A little past the minute's end, so the next ask falls in the next minute.
            self._budget_closed[workspace] = loop.time() + left_s + 0.05
            if len(self._budget_closed) > 4096:
                now = loop.time()
                self._budget_closed = {w: t for w, t in self._budget_closed.items() if t > now}
        return counted

    def _keep_lease(self, workspace: str, taken: int, asked: float, until: float) -> None:
        """Keep the turns a take counted beyond the one that runs now. Another turn's take of
        the same minute that ended meanwhile keeps its own: what both counted stays usable."""
        held = self._leases.get(workspace)
        lease = MinuteLease(taken, asked, until)
        if held is not None and held.until > asked and abs(held.until - until) < 1.0:
            lease.left += held.left  # both of the same minute
        self._leases[workspace] = lease
        if len(self._leases) > 4096:
            now = asyncio.get_running_loop().time()
            self._leases = {w: kept for w, kept in self._leases.items() if kept.until > now}
            self._taking = {w: lock for w, lock in self._taking.items() if lock.locked()}

    def note_backoff(self, error: BaseException | None) -> None:
        """A rate-limit answer starts (or lengthens) the provider's shared back-off."""
        loop = asyncio.get_running_loop()
        seconds = self._backoff.note(error, loop.time())
        if seconds is None:
            return
        metrics.MODEL_BACKOFFS.inc()
        metrics.MODEL_BACKOFF_ACTIVE.set(1)
        log.warning("the model provider asked to slow down; every turn waits",
                    extra={"delay_s": round(seconds, 3)})
        if self._backoff_timer is not None:
            self._backoff_timer.cancel()
        self._backoff_timer = loop.call_later(seconds, metrics.MODEL_BACKOFF_ACTIVE.set, 0)

    async def _provider_backoff(self) -> None:
        """Wait out the provider's shared back-off before taking a slot (the turn holds none)."""
        loop = asyncio.get_running_loop()
        while (left := self._backoff.remaining(loop.time())) > 0:
            if not await self._runtime.sleep(left):
                return

    async def _prune_budget(self) -> None:
        budget = self._runtime.budget
        assert budget is not None
        with contextlib.suppress(Exception):
            await budget.prune()
