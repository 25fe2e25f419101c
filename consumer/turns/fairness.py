"""Fair turn slots: which waiting turn runs next, across workspaces and their plans.

A consumer runs at most ``MAX_IN_FLIGHT`` engine turns at once. Taken in arrival order, one
workspace that floods the topic (a campaign answered by thousands of its customers at once)
takes every slot and every other workspace's customers wait behind it. Here a freed slot goes
to the waiting turn chosen by a weighted fair queue:

- **across workspaces** by stride scheduling: each workspace with waiting turns has a *pass*;
  the one with the lowest pass gets the slot and its pass grows by ``1 / weight`` (its plan's
  weight, ``PLAN_WEIGHTS``). Workspaces that keep turns waiting share the slots in proportion
  to their weights; a workspace that had nothing waiting starts at the current pass, so it
  gets the next slot or the one after, however long the others' queues are, and an idle
  workspace earns no credit to spend later. Workspaces tied on their pass are served least
  served first (below): the one whose next conversation has had the fewest turns.
- **within a workspace** least served first (least attained service): the slot goes to the
  waiting turn of the conversation that has had the fewest turns in the workspace's current
  busy period, oldest first among equals. A conversation with nothing served yet, a new
  customer, starts ahead of every conversation that already had a turn, instead of waiting
  for one turn of each of them (round robin). Conversations that all had turns still take
  turns in order, since each queues again behind the others after its turn.
- **lanes within a workspace**: its customers' messages and the inputs its host sends (a
  broadcast of ``start``s, events, timers' wakes) wait in two lanes that take turns while both
  have turns waiting. A broadcast to a hundred thousand customers is as many conversations
  with nothing served, the same as a new customer's: in one lane, the customer would wait
  behind all of the broadcast read so far; in its own, it waits for one turn of it at most.
- **a plan's cap** (``PLAN_MAX_IN_FLIGHT``): a workspace holding as many slots as its plan
  allows is passed over until one of its turns ends; its turns wait, nothing is dropped.

*Service* is counted in turns (slots granted), not in time held. A turn is what a customer
waits for, and the question asked is "has this conversation been answered yet in this rush";
the time a slot is held is mostly the model's latency, which says how long the answer was, not
how much of the service the conversation already had, and would rank a conversation behind
others because its model call was slow. Counting turns also keeps the order deterministic,
so the bounds below are exact.

The *busy period* of a workspace runs from its first waiting turn until it has no turn waiting
and holds no slot: then its counts are forgotten (a customer coming back after the rush is new
again) and memory follows the workspaces with work. A conversation that goes quiet within the
busy period keeps its count, so sending one message at a time earns no place ahead. The counts
of one busy period are bounded (``REMEMBERED_CONVERSATIONS`` per workspace; beyond it the
counts of conversations with nothing waiting are dropped).

*No conversation starves.* Least served first alone would let a stream of new conversations
hold back one that had a turn forever. So a waiting turn's place is ``enqueued + AGE_PER_TURN
x min(served, SERVICE_CAP)`` in the workspace's own clock of slots granted: a conversation that
had ``s`` turns lets new ones pass for ``AGE_PER_TURN x s`` grants at most, then goes before
anything that arrives later. Every waiting turn is granted within ``AGE_PER_TURN x SERVICE_CAP``
grants of its workspace plus the turns that were waiting when its place came up (at most one
per conversation), whatever arrives meanwhile (``tests/turns/test_fairness.py`` checks the
bound under any arrival sequence). With ``AGE_PER_TURN`` 1,024, a new customer passes every
conversation of a flood that had a turn as long as a round of the flood takes fewer than 1,024
turns of its workspace (a flood over fewer than about 1,000 conversations).

Order within a conversation is not touched here: one worker per conversation takes its inputs
one at a time, in offset order, so a conversation has at most one turn waiting.

Turns of deployments without workspaces (``AGENT``) all share the workspace ``""``, and a turn
queued without a conversation counts as one with nothing served: the queue is then first come,
first served, as before.

``FairQueue`` is the plain data structure (no asyncio, tested directly); ``FairSlots`` hands
out slots to awaiting tasks with it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["AGE_PER_TURN", "SERVICE_CAP", "FairQueue", "FairSlots", "lane_of"]

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

# Grants of its workspace a conversation lets newer conversations pass for each turn it had.
AGE_PER_TURN = 1024
# Turns beyond which a conversation counts as no more served (bounds the wait of a long one).
SERVICE_CAP = 8
# Conversations whose counts a workspace keeps in one busy period (beyond: idle ones dropped).
REMEMBERED_CONVERSATIONS = 100_000


def lane_of(parsed: Any) -> str:
    """A turn's lane in its workspace: ``customer`` for a customer's message, ``host`` for
    what the host or the timers send (``start``, ``event``, ``wake``)."""
    return "customer" if getattr(parsed, "kind", None) == "message" else "host"


@dataclass(order=True)
class _Waiting(Generic[T]):
    """A waiting item's place in its tenant's queue: lowest ``place`` first, then oldest."""

    place: int
    seq: int
    served: int = field(compare=False)
    conversation: Hashable | None = field(compare=False)
    item: Any = field(compare=False)


@dataclass
class _Tenant(Generic[T]):
    """One tenant's waiting items, by lane, and the service its conversations had in its busy
    period."""

    lanes: dict[Hashable, list[_Waiting[T]]] = field(default_factory=dict)  # heaps
    # Each lane's last grant (the tenant's clock): the lane granted longest ago goes next.
    granted: dict[Hashable, int] = field(default_factory=dict)
    size: int = 0
    clock: int = 0  # the tenant's slots granted in this busy period
    served: Counter[Hashable] = field(default_factory=Counter)
    waiting: Counter[Hashable] = field(default_factory=Counter)


class FairQueue(Generic[K, T]):
    """Items queued per tenant; ``pop`` takes from the tenant with the lowest pass (weighted
    stride scheduling), and within it the item of the least served conversation, aged so none
    waits for ever (see the module's docstring)."""

    def __init__(
        self, *, age_per_turn: int = AGE_PER_TURN, service_cap: int = SERVICE_CAP
    ) -> None:
        if age_per_turn < 1 or service_cap < 0:
            raise ValueError("age_per_turn must be >= 1 and service_cap >= 0")
        self._age_per_turn = age_per_turn
        self._service_cap = service_cap
        self._tenants: dict[K, _Tenant[T]] = {}
        self._weights: dict[K, float] = {}
        self._passes: dict[K, float] = {}
        # One entry per tenant with items: (pass, tie-breaker, tenant).
        self._heap: list[tuple[float, int, K]] = []
        self._order = itertools.count()
        self._clock = 0.0  # the pass of the last tenant served
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(
        self, tenant: K, item: T, weight: float = 1.0, conversation: Hashable | None = None,
        lane: Hashable = None,
    ) -> None:
        """Queue ``item`` for ``tenant``'s ``conversation`` (None: an item of its own, with
        nothing served) in ``lane``; ``weight`` (> 0) is the tenant's share from now on."""
        if not weight > 0:
            raise ValueError(f"weight must be > 0, got {weight}")
        self._weights[tenant] = weight
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = _Tenant()
        if not state.size:
            # Back from idle: at the current pass, never below it (no credit for idling).
            start = max(self._passes.get(tenant, 0.0), self._clock)
            self._passes[tenant] = start
            heapq.heappush(self._heap, (start + 1 / weight, next(self._order), tenant))
        served = 0
        if conversation is not None:
            served = state.served[conversation]
            state.waiting[conversation] += 1
        place = state.clock + self._age_per_turn * min(served, self._service_cap)
        heap = state.lanes.get(lane)
        if heap is None:
            heap = state.lanes[lane] = []
        heapq.heappush(heap, _Waiting(place, next(self._order), served, conversation, item))
        state.size += 1
        self._size += 1

    def pop(self, eligible: Callable[[K], bool] = lambda tenant: True) -> tuple[K, T] | None:
        """The next item of the eligible tenant with the lowest pass (among tenants tied on
        it, the one whose next conversation is the least served), or None when no eligible
        tenant has items. Tenants passed over keep their pass, so they come first once
        eligible again."""
        skipped: list[tuple[float, int, K]] = []
        chosen: tuple[float, int, K] | None = None
        while self._heap:
            entry = heapq.heappop(self._heap)
            if eligible(entry[2]):
                chosen = entry
                break
            skipped.append(entry)
        # Tenants tied on the pass: the one whose next turn's conversation had the fewest.
        while chosen is not None and self._heap and self._heap[0][0] == chosen[0]:
            entry = heapq.heappop(self._heap)
            if eligible(entry[2]) and self._head_served(entry[2]) < self._head_served(chosen[2]):
                entry, chosen = chosen, entry
            skipped.append(entry)
        for entry in skipped:
            heapq.heappush(self._heap, entry)
        if chosen is None:
            return None
        finish, _, tenant = chosen
        state = self._tenants[tenant]
        lane = self._next_lane(state)
        heap = state.lanes[lane]
        waiting = heapq.heappop(heap)
        state.granted[lane] = state.clock  # lanes with items take turns
        if not heap:
            del state.lanes[lane]
        state.size -= 1
        self._size -= 1
        state.clock += 1
        if waiting.conversation is not None:
            self._left(state, waiting.conversation)
            state.served[waiting.conversation] += 1
            if len(state.served) > REMEMBERED_CONVERSATIONS:
                self._forget_served(state)
        self._clock = max(self._clock, finish - 1 / self._weights[tenant])
        self._passes[tenant] = finish
        if state.size:
            weight = self._weights[tenant]
            heapq.heappush(self._heap, (finish + 1 / weight, next(self._order), tenant))
        elif len(self._passes) > 4 * len(self._tenants) + 64:
            self._forget_idle()
        return tenant, waiting.item

    def remove(self, tenant: K, item: T) -> bool:
        """Take a queued item out (its waiter gave up); True when it was queued."""
        state = self._tenants.get(tenant)
        if state is None:
            return False
        found, lane = next(
            ((w, lane) for lane, heap in state.lanes.items() for w in heap if w.item == item),
            (None, None),
        )
        if found is None:
            return False
        heap = state.lanes[lane]
        heap.remove(found)
        heapq.heapify(heap)
        if not heap:
            del state.lanes[lane]
        state.size -= 1
        if found.conversation is not None:
            self._left(state, found.conversation)
        self._size -= 1
        if not state.size:
            self._heap = [e for e in self._heap if e[2] != tenant]
            heapq.heapify(self._heap)
        return True

    def waiting(self, tenant: K) -> int:
        state = self._tenants.get(tenant)
        return state.size if state is not None else 0

    def served(self, tenant: K, conversation: Hashable) -> int:
        """The turns ``conversation`` of ``tenant`` had in the tenant's current busy period."""
        state = self._tenants.get(tenant)
        return state.served[conversation] if state is not None else 0

    def end_busy(self, tenant: K) -> None:
        """The tenant has nothing waiting and nothing running: its busy period is over, and
        the service its conversations had is forgotten."""
        state = self._tenants.get(tenant)
        if state is not None and not state.size:
            del self._tenants[tenant]

    def _head_served(self, tenant: K) -> int:
        state = self._tenants[tenant]
        return state.lanes[self._next_lane(state)][0].served

    @staticmethod
    def _next_lane(state: _Tenant[T]) -> Hashable:
        """The lane with items granted longest ago (never: first), in the order lanes came."""
        if len(state.lanes) == 1:
            return next(iter(state.lanes))
        return min(state.lanes, key=lambda lane: state.granted.get(lane, -1))

    @staticmethod
    def _left(state: _Tenant[T], conversation: Hashable) -> None:
        state.waiting[conversation] -= 1
        if state.waiting[conversation] <= 0:
            del state.waiting[conversation]

    @staticmethod
    def _forget_served(state: _Tenant[T]) -> None:
        """Too many conversations remembered in one busy period: drop the counts of those with
        nothing waiting (back, they count as new; memory stays bounded)."""
        for conversation in [c for c in state.served if c not in state.waiting]:
            del state.served[conversation]

    def _forget_idle(self) -> None:
        """Drop the passes of idle tenants at or below the clock: back from idle they would
        start at the clock anyway, so memory follows the tenants with items."""
        for tenant in [t for t, p in self._passes.items()
                       if (t not in self._tenants or not self._tenants[t].size)
                       and p <= self._clock]:
            del self._passes[tenant]
            self._weights.pop(tenant, None)


class FairSlots:
    """``slots`` turn slots handed out through a ``FairQueue`` of waiting tasks, with an
    optional cap of slots per tenant."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self._free = slots
        self._queue: FairQueue[str, asyncio.Future[None]] = FairQueue()
        self._held: Counter[str] = Counter()
        self._caps: dict[str, int] = {}

    @property
    def waiting(self) -> int:
        return len(self._queue)

    @property
    def free(self) -> int:
        return self._free

    def held(self, tenant: str) -> int:
        return self._held[tenant]

    def at_cap(self, tenant: str, cap: int | None) -> bool:
        """Whether ``tenant`` holds ``cap`` slots already (a turn of it would wait for its
        own, not for a free slot)."""
        return cap is not None and self._held[tenant] >= cap

    async def take(
        self, tenant: str, *, weight: float = 1.0, cap: int | None = None,
        conversation: Hashable | None = None, lane: Hashable = None,
    ) -> None:
        """Wait for a slot for ``tenant``'s ``conversation`` in ``lane`` (at most ``cap`` held
        at once by the tenant; lanes take turns, the least served conversation first). A
        cancelled wait takes nothing; a slot granted just as the wait was cancelled is given
        back."""
        if cap is not None:
            self._caps[tenant] = max(1, cap)
        else:
            self._caps.pop(tenant, None)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.push(tenant, future, weight, conversation, lane)
        self._dispatch()
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.give_back(tenant)
            else:
                self._queue.remove(tenant, future)
                self._settle(tenant)
            raise

    def give_back(self, tenant: str) -> None:
        """A slot of ``tenant`` is free again: the next waiting turn gets it."""
        self._held[tenant] -= 1
        if self._held[tenant] <= 0:
            del self._held[tenant]
            self._settle(tenant)
        self._free += 1
        self._dispatch()

    def served(self, tenant: str, conversation: Hashable) -> int:
        """Turns granted to ``conversation`` of ``tenant`` in the tenant's busy period."""
        return self._queue.served(tenant, conversation)

    def _settle(self, tenant: str) -> None:
        """A tenant with no turn waiting and no slot held: its busy period is over (memory
        follows the tenants with turns)."""
        if not self._held[tenant] and not self._queue.waiting(tenant):
            self._held.pop(tenant, None)
            self._caps.pop(tenant, None)
            self._queue.end_busy(tenant)

    def _eligible(self, tenant: str) -> bool:
        cap = self._caps.get(tenant)
        return cap is None or self._held[tenant] < cap

    def _dispatch(self) -> None:
        while self._free > 0:
            popped = self._queue.pop(self._eligible)
            if popped is None:
                return
            tenant, future = popped
            if future.done():  # its waiter was cancelled: nothing to grant
                continue
            self._free -= 1
            self._held[tenant] += 1
            future.set_result(None)
