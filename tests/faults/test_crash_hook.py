"""The crash hook itself: which value crashes where, and that an unset hook does nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from consumer.turns.crash import CRASH_EXIT_CODE, CrashPlan, parse_plan
from tests.faults.process import REPO

pytestmark = [pytest.mark.faults]

SCRIPT = """
from consumer.turns import crash
for point in ("after_load", "after_turn", "after_save", "after_save", "after_publish"):
    crash.reached(point)
    print(point, flush=True)
"""


def _run(value: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TURNFLOW_CRASH_AT"}
    env["PYTHONPATH"] = str(REPO)
    if value is not None:
        env["TURNFLOW_CRASH_AT"] = value
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)


def test_unset_hook_lets_every_point_pass() -> None:
    """Without TURNFLOW_CRASH_AT every point is passed and the process ends normally."""
    done = _run(None)
    assert done.returncode == 0
    assert done.stdout.split() == [
        "after_load", "after_turn", "after_save", "after_save", "after_publish"
    ]


def test_hook_exits_hard_at_the_nth_time_a_point_is_reached() -> None:
    """``after_save:2`` passes the first save point and exits with the crash code at the second,
    before anything after it runs."""
    done = _run("after_save:2")
    assert done.returncode == CRASH_EXIT_CODE
    assert done.stdout.split() == ["after_load", "after_turn", "after_save"]
    assert "crash at after_save" in done.stderr


def test_plan_parsing_refuses_unknown_points_and_counts() -> None:
    """Unknown points and counts below one are refused; empty means no plan."""
    assert parse_plan("") is None
    assert parse_plan(None) is None
    plan = parse_plan("before_commit")
    assert isinstance(plan, CrashPlan)
    assert (plan.point, plan.remaining) == ("before_commit", 1)
    with pytest.raises(ValueError, match="unknown point"):
        parse_plan("after_lunch")
    with pytest.raises(ValueError, match="at least 1"):
        parse_plan("after_turn:0")
