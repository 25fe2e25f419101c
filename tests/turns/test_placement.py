"""The consumer flags an input not on its session's partition (``consumer.turns.placement``)."""

from __future__ import annotations

import logging
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer import metrics
from consumer.partitioner import CachedPartitioner
from consumer.turns.placement import PlacementCheck

PARTITIONS = 6


def _off_partition_count() -> float:
    return metrics.INPUTS_OFF_PARTITION._value.get()


def test_inputs_where_murmur2_puts_them_pass_and_others_are_counted_and_warned_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Of many conversations, those placed as murmur2 places them pass silently; each of the
    others counts every input and is warned about once, naming both partitions."""
    check = PlacementCheck()
    murmur2 = CachedPartitioner()
    every = list(range(PARTITIONS))
    sessions = [f"conv-{i}" for i in range(40)]
    before = _off_partition_count()
    misplaced = set()
    with caplog.at_level(logging.WARNING, logger="turnflow.consumer"):
        for _ in range(3):
            for sid in sessions:
                right = murmur2(sid.encode(), every, every)
                crc = zlib.crc32(sid.encode()) % PARTITIONS  # librdkafka's default
                assert check.check(sid, "inbound", right, PARTITIONS)
                if crc != right:
                    misplaced.add(sid)
                    assert not check.check(sid, "inbound", crc, PARTITIONS)
    assert misplaced  # some of the forty hash differently under CRC32
    assert _off_partition_count() - before == 3 * len(misplaced)
    warned = [r for r in caplog.records
              if r.getMessage() == "input on another partition than its session's"]
    assert sorted(r.session_id for r in warned) == sorted(misplaced)  # type: ignore[attr-defined]
    for record in warned:
        sid = record.session_id  # type: ignore[attr-defined]
        assert record.expected_partition == murmur2(sid.encode(), every, every)  # type: ignore[attr-defined]
        assert record.partition != record.expected_partition  # type: ignore[attr-defined]


def test_the_warned_set_is_bounded() -> None:
    """Past ``max_warned`` conversations the set starts afresh instead of growing."""
    check = PlacementCheck(max_warned=5)
    for i in range(50):
        sid = f"s-{i}"
        wrong = (check.expected(sid, PARTITIONS) + 1) % PARTITIONS
        check.check(sid, "inbound", wrong, PARTITIONS)
        assert len(check._warned) <= 5


def test_an_unknown_partition_count_checks_nothing() -> None:
    assert PlacementCheck().check("s", "inbound", 3, 0)


@given(st.text(min_size=1, max_size=200), st.integers(min_value=1, max_value=64))
def test_any_session_id_has_one_expected_partition(session_id: str, partitions: int) -> None:
    """Any text, surrogates aside, hashes to a partition in range, where it passes."""
    try:
        session_id.encode()
    except UnicodeEncodeError:
        return
    check = PlacementCheck()
    expected = check.expected(session_id, partitions)
    assert 0 <= expected < partitions
    assert check.check(session_id, "inbound", expected, partitions)
