"""The pipeline benchmark runs every way on the same turns, and each way leaves out its part."""

from __future__ import annotations

import logging
from typing import Any

from bench.harness.stand_in_model import bench_agent
from bench.pipeline_bench import _KeptAnswers, _measure, _model_canned, _no_metrics, _no_turn_line
from consumer.turns.pipeline import TurnPipeline
from engine import ModelRequest


async def test_every_way_is_timed_in_every_round() -> None:
    taken = await _measure(sessions=3, rounds=2)
    assert set(taken) == {
        "whole path", "no turn log line", "no per-turn metrics", "model answer canned",
        "engine turn canned",
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


async def test_the_kept_model_answers_are_the_rules_own_and_need_no_rules() -> None:
    provider = bench_agent(0).config.provider
    rules = provider._inner
    kept = _KeptAnswers(rules)

    def request(message: str) -> Any:
        return ModelRequest(schema_name="speak", system="Responda em uma frase.", messages=[],
                            json_schema={}, meta={"message": message})

    with _model_canned(provider, kept.keeping()):
        first = await provider.generate(request("oi"))
    assert provider._inner is rules
    assert kept.answers == {("speak", "oi"): first}

    class _NoRules:
        async def generate(self, request: Any) -> Any:
            raise AssertionError("the rules were called")

    provider._inner = _NoRules()
    with _model_canned(provider, kept):
        again = await provider.generate(request("oi"))
    assert again is first
