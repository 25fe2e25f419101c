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
  workspace earns no credit to spend later.
- **within a workspace** first come, first served. A conversation has at most one turn
  waiting (one worker per conversation takes its inputs one at a time, in offset order), and
  it queues again at the back after each turn: so the conversations of a workspace take turns
  too, and a conversation's own order is never touched here.
- **a plan's cap** (``PLAN_MAX_IN_FLIGHT``): a workspace holding as many slots as its plan
  allows is passed over until one of its turns ends; its turns wait, nothing is dropped.

Turns of deployments without workspaces (``AGENT``) all share the workspace ``""``: the queue is
then first come, first served, as before.

``FairQueue`` is the plain data structure (no asyncio, tested directly); ``FairSlots`` hands
out slots to awaiting tasks with it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import Counter, deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["FairQueue", "FairSlots"]

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class FairQueue(Generic[K, T]):
    """Items queued per tenant; ``pop`` takes from the tenant with the lowest pass (weighted
    stride scheduling), oldest item first within a tenant."""

    def __init__(self) -> None:
        self._items: dict[K, deque[T]] = {}
        self._weights: dict[K, float] = {}
        self._passes: dict[K, float] = {}
        # One entry per tenant with items: (pass, tie-breaker, tenant).
        self._heap: list[tuple[float, int, K]] = []
        self._order = itertools.count()
        self._clock = 0.0  # the pass of the last tenant served
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, tenant: K, item: T, weight: float = 1.0) -> None:
        """Queue ``item`` for ``tenant``; ``weight`` (> 0) is the tenant's share from now on."""
        if not weight > 0:
            raise ValueError(f"weight must be > 0, got {weight}")
        self._weights[tenant] = weight
        queue = self._items.get(tenant)
        if queue is None:
            queue = self._items[tenant] = deque()
            # Back from idle: at the current pass, never below it (no credit for idling).
            start = max(self._passes.get(tenant, 0.0), self._clock)
            self._passes[tenant] = start
            heapq.heappush(self._heap, (start + 1 / weight, next(self._order), tenant))
        queue.append(item)
        self._size += 1

    def pop(self, eligible: Callable[[K], bool] = lambda tenant: True) -> tuple[K, T] | None:
        """The next item of the eligible tenant with the lowest pass, or None when no eligible
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
        for entry in skipped:
            heapq.heappush(self._heap, entry)
        if chosen is None:
            return None
        finish, _, tenant = chosen
        queue = self._items[tenant]
        item = queue.popleft()
        self._size -= 1
        self._clock = max(self._clock, finish - 1 / self._weights[tenant])
        self._passes[tenant] = finish
        if queue:
            weight = self._weights[tenant]
            heapq.heappush(self._heap, (finish + 1 / weight, next(self._order), tenant))
        else:
            del self._items[tenant]
            if len(self._passes) > 4 * len(self._items) + 64:
                self._forget_idle()
        return tenant, item

    def remove(self, tenant: K, item: T) -> bool:
        """Take a queued item out (its waiter gave up); True when it was queued."""
        queue = self._items.get(tenant)
        if queue is None or item not in queue:
            return False
        queue.remove(item)
        self._size -= 1
        if not queue:
            del self._items[tenant]
            self._heap = [e for e in self._heap if e[2] != tenant]
            heapq.heapify(self._heap)
        return True

    def waiting(self, tenant: K) -> int:
        return len(self._items.get(tenant, ()))

    def _forget_idle(self) -> None:
        """Drop the passes of idle tenants at or below the clock: back from idle they would
        start at the clock anyway, so memory follows the tenants with items."""
        for tenant in [t for t, p in self._passes.items()
                       if t not in self._items and p <= self._clock]:
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

    async def take(self, tenant: str, *, weight: float = 1.0, cap: int | None = None) -> None:
        """Wait for a slot for ``tenant`` (at most ``cap`` held at once by it). A cancelled
        wait takes nothing; a slot granted just as the wait was cancelled is given back."""
        if cap is not None:
            self._caps[tenant] = max(1, cap)
        else:
            self._caps.pop(tenant, None)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.push(tenant, future, weight)
        self._dispatch()
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.give_back(tenant)
            else:
                self._queue.remove(tenant, future)
            raise

    def give_back(self, tenant: str) -> None:
        """A slot of ``tenant`` is free again: the next waiting turn gets it."""
        self._held[tenant] -= 1
        if self._held[tenant] <= 0:
            del self._held[tenant]
            if not self._queue.waiting(tenant):
                self._caps.pop(tenant, None)  # memory follows the tenants with turns
        self._free += 1
        self._dispatch()

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
