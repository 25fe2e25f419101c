"""The window benchmark times each kind of turn in every round, on a real PostgreSQL."""

from __future__ import annotations

from bench.window_bench import PHASES, measure
from consumer import heap, history_cache


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
