"""The window benchmark times each kind of turn in every round, on a real PostgreSQL."""

from __future__ import annotations

import argparse

import pytest

from bench.window_bench import PHASES, _depths, measure, phases
from consumer import heap
from engine import history as history_cache


async def test_every_phase_is_timed_and_only_the_cold_one_makes_windows(database_url: str) -> None:
    made = history_cache.entries_of_text
    taken = await measure(database_url, sessions=4, rounds=2)
    assert list(taken) == list(PHASES)
    assert all(len(runs) == 2 for runs in taken.values())
    # Only the first turn here of a seeded conversation reads its history into a new window;
    # the others have none, or hold theirs (a fresh session's second turn extends its own).
    assert all(r["windows"] > 0 for r in taken["cold, 100 in"])
    assert all(r["windows"] == 0 for p in PHASES if p != "cold, 100 in" for r in taken[p])
    assert history_cache.entries_of_text is made and not heap.is_settled()  # all put back


async def test_each_depth_gets_its_cold_and_warm_phase(database_url: str) -> None:
    taken = await measure(database_url, sessions=3, rounds=1, history_turns=(2, 30))
    assert list(taken) == ["fresh", "fresh, 2nd", "cold, 2 in", "warm, 2 in",
                           "cold, 30 in", "warm, 30 in"] == list(phases((2, 30)))
    for depth in (2, 30):
        assert taken[f"cold, {depth} in"][0]["windows"] > 0
        assert taken[f"warm, {depth} in"][0]["windows"] == 0


def test_depths_are_distinct_whole_numbers_of_at_least_one() -> None:
    assert _depths("100") == (100,)
    assert _depths("100,1000") == (100, 1000)
    for bad in ("", "0", "-3", "100,100", "1e3", "100,", "ten"):
        with pytest.raises(argparse.ArgumentTypeError):
            _depths(bad)
