"""Seeing past a flood: records beyond a workspace's share are passed over and read again.

The look-ahead (``MAX_BUFFERED_RECORDS``) is what the fair queue chooses from. A partition that
holds its share of it used to pause: a flood larger than the look-ahead then filled it, and a
quiet workspace's record behind the flood on the same partition was not even read until the
flood drained to half the share, however fair the choice among the records read.

Here a full partition keeps being fetched. Each record read is *admitted* (held in memory,
queued for its conversation as before) or *passed over*: not held, only its offset, its
conversation and its tenant remembered. Once the partition has room again, the consumer seeks
back to its lowest passed-over offset and reads from there once more: the records passed over
are offered again in offset order; those already admitted or finished are skipped without being
parsed (``seen``). The rules:

- a partition under its share admits everything (nothing changes for a consumer that keeps up);
- at its share it admits a record only while the record's tenant (its workspace, as far as the
  consumer knows it: ``Tenants``; its host's inputs, and its customers' messages of
  conversations with nothing held, count as tenants of their own) holds less than an equal
  split of the share among the tenants holding records on the partition: the flooding
  workspace is passed over, a quiet one, or a new customer, is read and answered at once;
- at twice its share, or with ``max_records`` records passed over in all, nothing more is
  admitted or passed over: the partition pauses as before (memory stays bounded by settings);
- a record of a conversation that has an earlier record passed over is passed over too, so a
  conversation's inputs are still admitted in offset order (one writer, no reordering).

Offsets: a passed-over record is not done, so a partition's commit never moves past its lowest
passed-over offset (``lowest``). A crash or a rebalance loses nothing: the next owner reads from
the committed offset, and the turn log skips what was already answered (each input is applied
once, by its source). The cost is reading part of the partition again (counted in
``turnflow_lookahead_reread_records_total``) and, after a crash, more replays.

Alternatives measured against it (bench/README.md, "Fairness"): pausing the full partition (the
flood holds the quiet records back: a wait proportional to the flood), and a larger look-ahead
(memory proportional to the flood). Parking the records beyond the share in a PostgreSQL table
would let the commit move past them but costs two writes a parked record on the database every
turn already uses; re-reading costs the broker reads it was built for.

No I/O and no asyncio here: the service asks ``seen``/``admit`` for every record it reads,
``done`` for every record finished, and ``rewinds`` before every fetch for the seeks to make.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Collection, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from consumer import metrics
from consumer.turns.backpressure import Backpressure
from consumer.turns.fairness import lane_of
from consumer.turns.watermarks import OffsetWatermarks

__all__ = ["LookAhead", "PassOver", "Tenants"]

log = logging.getLogger("turnflow.consumer")

P = TypeVar("P", bound=Hashable)

Seen = Literal["new", "passed", "old"]


@dataclass
class _Partition:
    """One partition's passed-over records and who holds its admitted ones."""

    # offset -> (conversation, tenant, record timestamp in ms), in offset order.
    passed: dict[int, tuple[str, str, int]] = field(default_factory=dict)
    # conversation -> its passed-over offsets, oldest first.
    conversations: dict[str, deque[int]] = field(default_factory=dict)
    held: Counter[str] = field(default_factory=Counter)  # admitted and unfinished, by tenant
    tenant_of: dict[int, str] = field(default_factory=dict)  # admitted offset -> tenant
    high: int = -1  # one past the highest offset read
    rewound_until: int | None = None  # a re-read in progress, up to this offset


class PassOver(Generic[P]):
    """Which records of full partitions to pass over, and where to read them again."""

    def __init__(self, max_records: int) -> None:
        if max_records < 0:
            raise ValueError(f"max_records must be >= 0, got {max_records}")
        self._max = max_records
        self._parts: dict[P, _Partition] = {}
        self._count = 0
        self.reread = 0  # records read again that were already admitted (a cost figure)

    @property
    def enabled(self) -> bool:
        return self._max > 0

    def _part(self, partition: P) -> _Partition:
        part = self._parts.get(partition)
        if part is None:
            part = self._parts[partition] = _Partition()
        return part

    def seen(self, partition: P, offset: int) -> Seen:
        """``new`` (never read: now it is), ``passed`` (passed over before: offer it again with
        ``readmit``) or ``old`` (read and admitted before: skip it, it is pending or done)."""
        part = self._part(partition)
        if offset >= part.high:
            part.high = offset + 1
            self._end_reread(part, offset)
            return "new"
        self._end_reread(part, offset)
        if offset in part.passed:
            return "passed"
        self.reread += 1
        return "old"

    def admit(
        self, partition: P, offset: int, conversation: str, tenant: str, timestamp_ms: int,
        *, pending: int, share: int,
    ) -> bool:
        """A new record: True to admit it (hold it, queue it), False when it was passed over.
        ``pending`` is the partition's unfinished admitted records (or their bytes' worth, as
        a record count), ``share`` its share of the look-ahead."""
        part = self._part(partition)
        part.high = max(part.high, offset + 1)
        behind = conversation in part.conversations  # an earlier input of it is passed over
        if behind or not self._room(part, tenant, pending, share):
            if not behind and self._count >= self._max:
                return True  # the bound is reached: held, and the partition pauses
            part.passed[offset] = (conversation, tenant, timestamp_ms)
            part.conversations.setdefault(conversation, deque()).append(offset)
            self._count += 1
            return False
        self._hold(part, offset, tenant)
        return True

    def readmit(self, partition: P, offset: int, *, pending: int, share: int) -> str | None:
        """A passed-over record read again: its conversation when it is admitted now (it leaves
        the passed-over ones), None when it stays passed over."""
        part = self._parts[partition]
        conversation, tenant, _ = part.passed[offset]
        waiting = part.conversations[conversation]
        if waiting[0] != offset or not self._room(part, tenant, pending, share):
            return None  # an earlier record of its conversation is still passed over, or full
        waiting.popleft()
        if not waiting:
            del part.conversations[conversation]
        del part.passed[offset]
        self._count -= 1
        self._hold(part, offset, tenant)
        return conversation

    def done(self, partition: P, offset: int) -> None:
        """An admitted record finished (or was dropped): its tenant holds one less."""
        part = self._parts.get(partition)
        if part is None:
            return
        tenant = part.tenant_of.pop(offset, None)
        if tenant is not None:
            part.held[tenant] -= 1
            if part.held[tenant] <= 0:
                del part.held[tenant]

    def lowest(self, partition: P) -> int | None:
        """The lowest passed-over offset (the partition's commit stays at or below it)."""
        part = self._parts.get(partition)
        if part is None or not part.passed:
            return None
        return next(iter(part.passed))  # insertion order is offset order

    def rewinds(self, owned: Iterable[P], pending: Callable[[P], int], share: int) -> dict[P, int]:
        """Partitions to read again, and from where: those with records passed over, room for
        half a share, and no re-read in progress."""
        seeks: dict[P, int] = {}
        for partition in owned:
            part = self._parts.get(partition)
            if part is None or not part.passed or part.rewound_until is not None:
                continue
            if pending(partition) < max(1, share // 2):
                part.rewound_until = part.high
                seeks[partition] = next(iter(part.passed))
        return seeks

    def full(self) -> bool:
        """As many records passed over as the bound allows: full partitions pause instead."""
        return self._count >= self._max

    def passed_over(self, partition: P | None = None) -> int:
        if partition is not None:
            part = self._parts.get(partition)
            return len(part.passed) if part is not None else 0
        return self._count

    def oldest_age_s(self, now_ms: int | None = None) -> float:
        """Age of the oldest passed-over record (by its timestamp), 0 with none."""
        now = time.time() * 1000 if now_ms is None else now_ms
        stamps = [next(iter(p.passed.values()))[2] for p in self._parts.values() if p.passed]
        return max(0.0, (now - min(stamps)) / 1000) if stamps else 0.0

    def forget(self, partitions: Collection[P]) -> None:
        """Partitions revoked or newly assigned: the next read starts from the committed
        offset, which is at or below every record passed over."""
        for partition in partitions:
            part = self._parts.pop(partition, None)
            if part is not None:
                self._count -= len(part.passed)

    # -- rules --------------------------------------------------------------------------------

    def _room(self, part: _Partition, tenant: str, pending: int, share: int) -> bool:
        if not self.enabled or pending < share:
            return True
        if pending >= 2 * share:
            return False
        tenants = len(part.held) + (tenant not in part.held)
        return part.held[tenant] < max(1, share // tenants)

    @staticmethod
    def _hold(part: _Partition, offset: int, tenant: str) -> None:
        part.tenant_of[offset] = tenant
        part.held[tenant] += 1

    @staticmethod
    def _end_reread(part: _Partition, offset: int) -> None:
        if part.rewound_until is not None and offset + 1 >= part.rewound_until:
            part.rewound_until = None


class Tenants:
    """Whose record it is, as far as the fetch loop can tell without a round trip: the
    workspace last seen for the record's agent, else for its conversation, else the agent id
    itself (``agent:...``), else ``""``. Learned from the routes of the turns that ran; bounded
    (least recently used forgotten first)."""

    def __init__(self, agents: int = 4096, conversations: int = 65536) -> None:
        self._agents: OrderedDict[str, str] = OrderedDict()
        self._conversations: OrderedDict[str, str] = OrderedDict()
        self._sizes = (agents, conversations)

    def learn(self, conversation: str, agent_id: str | None, workspace: str | None) -> None:
        if workspace is None:
            return
        if agent_id is not None:
            _put(self._agents, agent_id, workspace, self._sizes[0])
        _put(self._conversations, conversation, workspace, self._sizes[1])

    def of(self, conversation: str, agent_id: str | None) -> str:
        if agent_id is not None and (found := self._agents.get(agent_id)) is not None:
            return found
        if (found := self._conversations.get(conversation)) is not None:
            return found
        return f"agent:{agent_id}" if agent_id is not None else ""


def _put(table: OrderedDict[str, str], key: str, value: str, size: int) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > size:
        table.popitem(last=False)


class LookAhead(Generic[P]):
    """The fetch loop's questions about the look-ahead, answered from the watermarks (what is
    held), the back-pressure rules (the shares) and ``PassOver`` (what is passed over): the
    service asks, this module decides."""

    def __init__(
        self, marks: OffsetWatermarks[P], backpressure: Backpressure[P], max_passed_over: int
    ) -> None:
        self._marks = marks
        self._backpressure = backpressure
        self.passing: PassOver[P] = PassOver(max_passed_over)
        self.tenants = Tenants()
        self._owned = 1

    def owned(self, count: int) -> None:
        """How many partitions share the look-ahead now."""
        self._owned = max(1, count)

    def _room(self, partition: P) -> dict[str, int]:
        """The partition's unfinished records (its bytes' share counts as its records' share
        when reached first) and its share."""
        share = self._backpressure.share(self._owned)
        pending = self._marks.pending_count(partition)
        byte_share = self._backpressure.byte_share(self._owned)
        if byte_share is not None:
            pending = max(pending, share * self._marks.pending_bytes(partition) // byte_share)
        return {"pending": pending, "share": share}

    def first_look(self, partition: P, offset: int) -> Literal["new", "again", "skip"]:
        """Before parsing: ``new`` (never read), ``again`` (passed over before and admitted
        now) or ``skip`` (admitted before, so pending or done, or passed over again)."""
        seen = self.passing.seen(partition, offset)
        if seen == "old":
            return "skip"
        if seen == "passed":
            admitted = self.passing.readmit(partition, offset, **self._room(partition))
            return "skip" if admitted is None else "again"
        return "new"

    def admit(
        self, partition: P, offset: int, parsed: Any, timestamp_ms: int, *, active: bool = True
    ) -> bool:
        """After parsing a record read for the first time: False when it is passed over.
        ``active``: its conversation has inputs held already."""
        # A workspace's host inputs (a broadcast of starts) and its customers' messages count
        # apart, as their lanes in the fair queue do: a broadcast never hides a new customer.
        # So do the first messages of conversations with nothing held: a customer writing
        # during a flood of the workspace's other conversations is read, not passed over.
        tenant = self.tenants.of(parsed.session_id, parsed.agent_id)
        if lane_of(parsed) != "customer":
            tenant += "/host"
        elif not active:
            tenant += "/new"
        return self.passing.admit(
            partition, offset, parsed.session_id, tenant, timestamp_ms, **self._room(partition)
        )

    def done(self, partition: P, offset: int) -> None:
        self.passing.done(partition, offset)

    def guess(self, parsed: Any) -> tuple[str, str, str]:
        """An input's workspace as far as known before its load (``Tenants``), its conversation
        and its lane: where it waits for its load in the fair queue."""
        return (self.tenants.of(parsed.session_id, parsed.agent_id), parsed.session_id,
                lane_of(parsed))

    def pressure(self, partition: P) -> int:
        """The count back-pressure pauses on: a partition that can pass records over keeps
        being read up to twice its share (the quiet records behind a flood come in); one that
        cannot (passing over off, or its bound reached) pauses at its share, as before."""
        pending = self._marks.pending_count(partition)
        if not self.passing.enabled or self.passing.full():
            return pending
        return pending // 2

    def committable(self, partition: P) -> int | None:
        """The offset to commit: below every unfinished record and every one passed over."""
        mark = self._marks.committable(partition)
        lowest = self.passing.lowest(partition)
        if mark is None or lowest is None:
            return mark
        return min(mark, lowest)

    def observe(self) -> None:
        """Export what is passed over, its age, and the records read again since last time."""
        metrics.PASSED_OVER_RECORDS.set(self.passing.passed_over())
        metrics.PASSED_OVER_AGE.set(self.passing.oldest_age_s())
        if self.passing.reread:
            metrics.REREAD_RECORDS.inc(self.passing.reread)
            self.passing.reread = 0

    def rewinds(self, owned: Iterable[P]) -> dict[P, int]:
        """Seeks to make before the next fetch: partitions with room to read what they passed
        over."""
        share = self._backpressure.share(self._owned)
        return self.passing.rewinds(owned, self._marks.pending_count, share)

    def rewind(self, consumer: Any, owned: Iterable[P]) -> None:
        """Make those seeks on ``consumer`` (the client's ``seek``: the next fetch of the
        partition starts there; records it had buffered past it are dropped)."""
        seeks = self.rewinds(owned)
        for partition, offset in seeks.items():
            consumer.seek(partition, offset)
        if seeks:
            log.info(
                "passed-over records read again",
                extra={"partitions": sorted(getattr(p, "partition", p) for p in seeks),
                       "passed_over": self.passing.passed_over()},
            )
