"""The end-to-end benchmark's profile categories: each sample is charged to the part of the
process that spent it, so the engine's share is the engine's own work, not the stand-in model's
or start-up's."""

from __future__ import annotations

from bench.e2e_bench import _category
from bench.harness import REPO

ENGINE = f"{REPO}/engine"
CONSUMER = f"{REPO}/consumer/turns/pipeline.py:apply"
TURN = f"{ENGINE}/agent.py:turn"
OBSERVED = f"{ENGINE}/providers/http.py:observed"
STAND_IN = f"{REPO}/bench/harness/stand_in_model.py"


def test_the_engine_s_own_frames_are_the_engine() -> None:
    assert _category([CONSUMER, TURN, f"{ENGINE}/phases/advance.py:walk"]) == "engine"
    # The engine's wrapper around a provider call is engine work, as it is for a hosted model.
    assert _category([CONSUMER, TURN, OBSERVED]) == "engine"


def test_the_benchmark_s_latency_wrapper_is_the_model_s() -> None:
    for leaf in (f"{STAND_IN}:generate", f"{STAND_IN}:call"):
        assert _category([CONSUMER, TURN, OBSERVED, leaf]) == "model (offline stand-in)"
    rules = f"{ENGINE}/providers/rules.py:speak"
    assert _category([CONSUMER, TURN, OBSERVED, f"{STAND_IN}:call", rules]) == (
        "model (offline stand-in)"
    )


def test_other_benchmark_code_under_the_engine_stays_the_engine_s() -> None:
    # Only the wrapper's two functions stand in for the model; an agent's own handler that
    # happens to live in the benchmark is work the engine runs.
    assert _category([CONSUMER, TURN, f"{STAND_IN}:handler"]) == "engine"


def test_imports_are_start_up_whoever_imports() -> None:
    path = [TURN, "<frozen importlib._bootstrap>:_find_and_load", f"{ENGINE}/agent.py:<module>"]
    assert _category(path) == "start-up (imports)"


def test_the_rest_goes_by_the_innermost_known_package() -> None:
    asyncpg = "/x/site-packages/asyncpg/connection.py:_do_execute"
    assert _category([CONSUMER, asyncpg]) == "database"
    assert _category([CONSUMER]) == "consumer"
    assert _category(["/x/unknown.py:f"]) == "other"
