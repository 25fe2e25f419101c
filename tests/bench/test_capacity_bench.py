"""The capacity benchmark at a tiny size: it fills, measures both databases and reports every
figure (the large sizes are run by hand: make bench-capacity)."""

from __future__ import annotations

import math

import pytest

from bench import capacity_bench


def test_the_capacity_bench_runs_at_a_tiny_size(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", database_url)
    report = capacity_bench.run(turns=3000, sessions=300, calls=12)
    assert report["fill"]["disk_gb"] > 0 and report["fill"]["turns_per_s"] > 0
    assert report["rounds"] == 3
    for name, ratios in report["ratios"].items():  # one a round; the whole-JSON saves once
        if "CPU" in name:  # read in clock ticks of 10 ms: a dozen saves may show none
            assert all(r >= 0 for r in ratios), (name, ratios)
            continue
        assert len(ratios) == (1 if "whole-JSON" in name else 3), (name, ratios)
        assert all(r > 0 for r in ratios), (name, ratios)
    assert any("the search of sessions" in line for line in report["plans"])
    for name in ("save p50 ms (word index)", "save p50 ms (whole-JSON trigrams)",
                 "history read p50 ms", "inspector search p50 ms", "inspector page p50 ms",
                 "erase p50 ms"):
        for side in ("empty", "filled"):
            assert report[side][name] > 0, (side, name)
    dropped = [k for k in report["filled"] if k.startswith("drop a month")]
    assert len(dropped) == 1 and "turns)" in dropped[0]
    assert all(not math.isnan(v) for v in report["filled"].values())


def test_without_the_json_trigrams_the_run_leaves_out_only_their_rows(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", database_url)
    report = capacity_bench.run(turns=600, sessions=60, calls=6, json_trigrams=False)
    for side in ("empty", "filled"):
        assert not any("whole-JSON" in name for name in report[side]), report[side]
        assert report[side]["save p50 ms (no search index)"] > 0
        assert report[side]["history read p50 ms"] > 0


@pytest.mark.parametrize("argv", [["--turns", "0"], ["--calls", "0"], ["--sessions", "0"],
                                  ["--turns", "ten"]])
def test_bad_sizes_are_refused_with_a_reason(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        capacity_bench.main(argv)
    assert exit_.value.code == 2
    assert "--" in capsys.readouterr().err
