"""The heap settings of a service process (consumer.heap): start-up frozen, the young
generation collected less often, every collection timed into ``turnflow_gc_seconds_total``,
and cycles made afterwards still collected."""

from __future__ import annotations

import gc
import weakref

import pytest

from consumer import cli, heap, metrics


def _gc_seconds(generation: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "turnflow_gc_seconds_total", {"generation": generation}
    )
    assert value is not None
    return value


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_settle_freezes_start_up_and_collects_the_young_generation_less_often() -> None:
    before = gc.get_threshold()
    heap.settle()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, before[1], before[2])
    heap.settle()  # idempotent: one timing callback, the same threshold
    assert gc.callbacks.count(heap._timed) == 1
    assert gc.get_threshold()[0] == heap.YOUNG_THRESHOLD
    heap.unsettle()
    assert gc.get_freeze_count() == 0 and not heap.is_settled()
    assert gc.get_threshold() == (700, before[1], before[2])


def test_every_collection_is_timed_by_generation() -> None:
    heap.settle()
    young, full = _gc_seconds("0"), _gc_seconds("2")
    gc.collect(0)
    gc.collect(2)
    assert _gc_seconds("0") > young
    assert _gc_seconds("2") > full


def test_cycles_made_after_settling_are_still_collected() -> None:
    heap.settle()
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is None


def test_objects_alive_at_settling_are_not_visited_again() -> None:
    kept = [_Node() for _ in range(1000)]
    heap.settle()
    tracked = {id(o) for o in gc.get_objects()}
    assert not any(id(node) in tracked for node in kept)
    heap.unsettle()
    tracked = {id(o) for o in gc.get_objects()}
    assert all(id(node) in tracked for node in kept)


def test_a_collector_switched_off_stays_off() -> None:
    before = gc.get_threshold()
    gc.set_threshold(0, before[1], before[2])
    try:
        heap.settle()
        assert gc.get_threshold()[0] == 0
    finally:
        heap.unsettle()
        gc.set_threshold(*before)


@pytest.mark.parametrize("command", [
    ["consume", "--workers", "1", "--agent", "tests.integration.harness:counting_agent"],
    ["schedule"],
])
def test_the_service_commands_settle_the_heap_before_they_start(
    command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``consume`` (one process, as each worker of ``--workers N`` runs) and ``schedule``
    settle the heap once their start-up is done; here the servers do not answer, so the
    command ends at once, settled."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    assert not heap.is_settled()
    assert cli.main(command) == 1
    assert heap.is_settled() and gc.get_freeze_count() > 0
