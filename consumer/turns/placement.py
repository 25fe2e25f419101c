"""Inputs on another partition than their session's: a producer that partitions differently.

One conversation must stay on one partition of the inbound topic. The consumer that owns that
partition is then the conversation's only writer, and the scheduler's wakes, keyed by session id
and partitioned as Kafka's Java client and aiokafka partition (murmur2 of the key), land in the
same place as the customer's messages. A channel adapter written with librdkafka (confluent-kafka
and the clients built on it) hashes keys with CRC32 unless it sets
``partitioner=murmur2_random``, and an adapter that keys records by something other than the
session id, or not at all, scatters them: a conversation's messages and its wakes then arrive on
two partitions, owned by two consumers at once. The stored session's optimistic version keeps
that from losing or doubling a turn (the second save is refused and its input rerun), but the
order between the two partitions' inputs is no longer the order they were sent in.

``PlacementCheck`` compares each input's partition with the one its session id hashes to. A
mismatch counts in ``turnflow_inputs_off_partition_total`` and is logged once per conversation;
the set of conversations already warned about is bounded (cleared when full), so a producer
that misplaces everything costs a warning per conversation now and then, not unbounded memory.
"""

from __future__ import annotations

import logging

from consumer import metrics
from consumer.partitioner import CachedPartitioner

__all__ = ["MAX_WARNED", "PlacementCheck"]

log = logging.getLogger("turnflow.consumer")

MAX_WARNED = 10_000
"""Conversations remembered as already warned about; past it the set starts afresh."""


HINT = ("a producer of the inbound topic must key records by session id and partition them "
        "with murmur2 (librdkafka clients: partitioner=murmur2_random)")


class PlacementCheck:
    """Says whether an input is on its session's partition; counts and warns when it is not."""

    def __init__(self, *, max_warned: int = MAX_WARNED) -> None:
        self._partitioner = CachedPartitioner()
        self._warned: set[str] = set()
        self._max_warned = max_warned

    def expected(self, session_id: str, partitions: int) -> int:
        """The partition of ``partitions`` that ``session_id`` hashes to (murmur2)."""
        every = range(partitions)
        return self._partitioner(session_id.encode(), every, every)

    def check(self, session_id: str, topic: str, partition: int, partitions: int) -> bool:
        """True when the input is where its session's wakes go; otherwise count it, warn once
        for the conversation, and return False. ``partitions`` is the topic's count (0 when
        unknown: nothing is checked)."""
        if partitions <= 0:
            return True
        expected = self.expected(session_id, partitions)
        if expected == partition:
            return True
        metrics.INPUTS_OFF_PARTITION.inc()
        if session_id not in self._warned:
            if len(self._warned) >= self._max_warned:
                self._warned.clear()
            self._warned.add(session_id)
            log.warning(
                "input on another partition than its session's",
                extra={"session_id": session_id, "topic": topic, "partition": partition,
                       "expected_partition": expected, "hint": HINT},
            )
        return False
