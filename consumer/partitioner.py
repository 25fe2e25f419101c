"""The producer's partitioner: Kafka's default key hashing, remembered per key.

A record's partition must be the one every Kafka client picks for its key (murmur2 of the key,
as the Java client and aiokafka's ``DefaultPartitioner`` hash it), so replies and timers of one
session land where consumers of those topics expect them. aiokafka hashes in pure Python, about
5 µs a key, and the consumer sends two records a turn for keys it has just seen (the session
id of the reply and of the timer), so the hash of each key is kept: same answer, a dict lookup.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka.partitioner import DefaultPartitioner, murmur2

__all__ = ["CachedPartitioner"]

MAX_KEYS = 65_536
"""Keys whose hash is kept; past it the memo starts afresh (a bound, not an eviction order)."""


class CachedPartitioner:
    """``DefaultPartitioner``'s choice for every key, with each key's hash computed once."""

    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys must be at least 1, got {max_keys}")
        self._max_keys = max_keys
        self._hashes: dict[bytes, int] = {}
        self._default = DefaultPartitioner()

    def __call__(self, key: bytes | None, all_partitions: Sequence[int],
                 available: Sequence[int]) -> int:
        if key is None:
            chosen: int = self._default(key, all_partitions, available)  # random, as Kafka's
            return chosen
        hashed = self._hashes.get(key)
        if hashed is None:
            if len(self._hashes) >= self._max_keys:
                self._hashes.clear()
            hashed = self._hashes[key] = murmur2(key) & 0x7FFFFFFF
        return all_partitions[hashed % len(all_partitions)]
