"""The cached partitioner picks exactly the partition Kafka's default partitioner picks."""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given
from hypothesis import strategies as st

from consumer.outbox import new_producer
from consumer.partitioner import CachedPartitioner

partition_lists = st.integers(min_value=1, max_value=64).map(lambda n: list(range(n)))


@given(st.lists(st.binary(max_size=40) | st.text(max_size=20).map(str.encode), max_size=30),
       partition_lists, st.integers(min_value=1, max_value=8))
def test_same_partition_as_the_default_partitioner(
    keys: list[bytes], partitions: list[int], max_keys: int
) -> None:
    """For any keys, asked in any order and again (from the memo, and after the memo filled
    and started afresh), the answer is the default partitioner's."""
    cached = CachedPartitioner(max_keys=max_keys)
    default = DefaultPartitioner()
    for key in keys + keys[::-1]:
        assert cached(key, partitions, partitions) == default(key, partitions, partitions)
    assert len(cached._hashes) <= max_keys


def test_known_hashes_of_the_java_client() -> None:
    """Partitions of the Java client's murmur2 for fixed keys (its test vectors), so the memo
    cannot drift from Kafka's partitioning even if aiokafka's changed."""
    cached = CachedPartitioner()
    # murmur2 & 0x7fffffff of these keys, from Kafka's UtilsTest / DefaultPartitionerTest.
    vectors = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string":
               -985981536, b"a-little-bit-longer-string": -1486304829,
               b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
               b"abc": 479470107}
    for key, signed in vectors.items():
        expected = (signed & 0x7FFFFFFF) % 1000
        assert cached(key, list(range(1000)), []) == expected


def test_a_key_of_none_goes_to_an_available_partition() -> None:
    cached = CachedPartitioner()
    for _ in range(50):
        assert cached(None, [0, 1, 2, 3], [2]) == 2


async def test_the_publishers_producer_uses_it() -> None:
    producer = new_producer("127.0.0.1:1", idempotent=False)
    assert isinstance(producer._partitioner, CachedPartitioner)
    await producer.stop()  # never started: closes the client it made
