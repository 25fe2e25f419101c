"""The pipeline benchmark runs every way on the same turns, and each way leaves out its part."""

from __future__ import annotations

import logging

from bench.pipeline_bench import _measure, _no_metrics, _no_turn_line
from consumer.pipeline import TurnPipeline


async def test_every_way_is_timed_in_every_round() -> None:
    taken = await _measure(sessions=3, rounds=2)
    assert set(taken) == {
        "whole path", "no turn log line", "no per-turn metrics", "engine turn canned"
    }
    assert all(len(values) == 2 and all(v > 0 for v in values) for values in taken.values())


def test_the_lesions_leave_out_their_part_and_put_it_back() -> None:
    logger = logging.getLogger("turnflow")
    level, observe = logger.level, TurnPipeline._observe
    with _no_turn_line():
        assert not logger.isEnabledFor(logging.INFO)
    with _no_metrics():
        assert TurnPipeline._observe is not observe
    assert logger.level == level and TurnPipeline._observe is observe
