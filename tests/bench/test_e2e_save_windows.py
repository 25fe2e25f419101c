"""The end-to-end benchmark compares each one-process 0 ms run with the save transaction
measured right before and right after that run, not once after every other run: on a host
whose speed swings between minutes, only figures taken side by side make a ratio.

``run`` is driven here with its servers, its runs and its save measurements replaced by
recorders, so what is checked is where the save windows fall among the runs and which windows
each printed ratio uses."""

from __future__ import annotations

import argparse
import re
from contextlib import ExitStack
from typing import Any

import pytest

from bench import e2e_bench
from bench.e2e_bench import RunResult, SaveBaseline
from bench.harness.servers import Servers


class _Recorder:
    """Stands in for the servers, the runs and the save windows; logs the order of events.

    Window k measures (1000 * (k + 1)) saves/s at (0.1 * (k + 1)) ms client CPU per save, and
    every one-process run gives 600 turns/s at 0.6 ms, so each printed ratio names its windows;
    a run of several processes gives 900 turns/s at 0.5 ms of their CPU."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.windows = 0

    def saves(self, url: str, clients: int, seconds: float) -> tuple[float, float]:
        assert seconds == e2e_bench.SAVE_WINDOW_S
        self.windows += 1
        self.events.append(f"window {self.windows}")
        return 1000.0 * self.windows, 0.1 * self.windows

    async def run_once(self, servers: Servers, **settings: Any) -> RunResult:
        latency, workers = settings["latency_ms"], settings.get("workers", 1)
        history = settings.get("history_turns", 0)
        self.events.append(
            f"run {latency} ms {settings['partitions']} parts {workers} procs {history} hist"
        )
        return RunResult(
            latency_ms=latency, partitions=settings["partitions"], inputs=10,
            turns_per_s=600.0 if workers == 1 else 900.0,
            cpu_ms_per_turn=0.6 if workers == 1 else 0.5, paced_rate=1.0, paced_inputs=1,
            p50_ms=1.0, p95_ms=1.0, p99_ms=1.0, workers=workers, history_turns=history,
        )


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> _Recorder:
    recorder = _Recorder()

    async def one_call() -> float:
        return 1.0

    def servers(stack: ExitStack) -> Servers:
        return Servers("postgresql://nowhere/x", "nowhere:9092", "stand-ins", False)

    monkeypatch.setattr(e2e_bench, "start_servers", servers)
    monkeypatch.setattr(e2e_bench, "calls_per_turn", one_call)
    monkeypatch.setattr(e2e_bench, "_store_saves_per_second", recorder.saves)
    monkeypatch.setattr(e2e_bench, "run_once", recorder.run_once)
    return recorder


def _args(**given: Any) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    e2e_bench.add_arguments(parser)
    args = parser.parse_args(["--no-profile"])
    for name, value in given.items():
        setattr(args, name, value)
    return args


def test_each_0_ms_run_has_a_save_window_right_before_and_after(
    recorder: _Recorder, capsys: pytest.CaptureFixture[str]
) -> None:
    assert e2e_bench.run(_args()) == 0
    assert recorder.events == [
        "window 1",
        "run 0 ms 1 parts 1 procs 0 hist",
        "window 2",  # after the first 0 ms run and before the second: both use it
        "run 0 ms 8 parts 1 procs 0 hist",
        "window 3",
        "run 0 ms 8 parts 1 procs 100 hist",  # the long-history row, beside the others
        "window 4",
        "run 200 ms 1 parts 1 procs 0 hist",
        "run 200 ms 8 parts 1 procs 0 hist",
        "run 1000 ms 1 parts 1 procs 0 hist",
        "run 1000 ms 8 parts 1 procs 0 hist",
        "run 0 ms 8 parts 2 procs 0 hist",  # compared with one process, not with the save
    ]
    out = capsys.readouterr().out
    assert "4 window(s) of 4 s): 1000-4000 saves/s, 0.10-0.40 ms client CPU per save" in out
    # The mean of each run's own two windows: (1000 + 2000) / 2, (2000 + 3000) / 2, ...
    ratios = re.findall(
        r"0 ms, (\d) partition\(s\)([^:]*): 600 turns/s = ([\d.]+) x the save rate "
        r"\((\d+) saves/s\); CPU per turn 0.60 ms = ([\d.]+) x the save's client CPU "
        r"\(([\d.]+) ms\)",
        out,
    )
    assert ratios == [
        ("1", "", "0.40", "1500", "4.0", "0.15"),
        ("8", "", "0.24", "2500", "2.4", "0.25"),
        ("8", ", sessions 100 turns in", "0.17", "3500", "1.7", "0.35"),
    ]


def test_the_targets_and_the_processes_per_cpu_second_are_printed_from_the_run(
    recorder: _Recorder, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each target as this run's ratio (a median where several rows give it) and whether it
    is met; the two-process row also per second of the consumer processes' own CPU."""
    assert e2e_bench.run(_args()) == 0
    out = capsys.readouterr().out
    assert ("0 ms, 8 partitions, 2 processes: 900 turns/s = 1.50 x one process (600 turns/s); "
            "per second of consumer CPU (the consumer processes' own): 2000 turns against "
            "1667 for one process (1.20 x)") in out
    targets = out.split("targets, each a ratio of this run:\n", 1)[1].splitlines()
    assert targets[:5] == [
        # Fresh: the 1- and 8-partition rows, 0.6 ms against 0.15 and 0.25 ms per save.
        "  0 ms, fresh sessions: CPU per turn 3.20 (median of 2: 2.40-4.00) x the save's "
        "client CPU, NOT met (at most 2)",
        "  0 ms, fresh sessions: turns/s 0.32 (median of 2: 0.24-0.40) x the save rate, "
        "NOT met (at least 0.6)",
        "  0 ms, sessions 100 turns in: CPU per turn 1.71 x the save's client CPU, met "
        "(at most 2.3)",
        "  0 ms, sessions 100 turns in: turns/s 0.17 x the save rate, NOT met (at least 0.6)",
        # 600 turns/s against 64 in flight / 0.2 s = 320.
        "  200 ms: turns/s 1.88 (median of 2: 1.88-1.88) of the bound (320), met (at least 1)",
    ]


def test_without_a_0_ms_run_the_save_is_measured_once(
    recorder: _Recorder, capsys: pytest.CaptureFixture[str]
) -> None:
    assert e2e_bench.run(_args(latencies="200", partitions="1")) == 0
    assert recorder.events == ["run 200 ms 1 parts 1 procs 0 hist", "window 1"]
    out = capsys.readouterr().out
    assert "1 window(s) of 4 s): 1000-1000 saves/s" in out
    assert "x the save rate" not in out  # no 0 ms run, nothing to compare


def test_a_baseline_is_the_mean_of_its_two_windows() -> None:
    base = SaveBaseline(before=(2000.0, 0.2), after=(3000.0, 0.4))
    assert base.saves_per_s == 2500.0
    assert base.cpu_ms == pytest.approx(0.3)



def test_repeated_0_ms_runs_alternate_and_give_their_spread_and_median(
    recorder: _Recorder, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _args(latencies="0,200", partitions="1,8", repeat=2, processes=0, long_turns=0)
    assert e2e_bench.run(args) == 0
    assert recorder.events == [
        "window 1",
        "run 0 ms 1 parts 1 procs 0 hist",
        "window 2",
        "run 0 ms 8 parts 1 procs 0 hist",
        "window 3",
        "run 0 ms 1 parts 1 procs 0 hist",
        "window 4",
        "run 0 ms 8 parts 1 procs 0 hist",
        "window 5",
        "run 200 ms 1 parts 1 procs 0 hist",  # the latency rows are not repeated
        "run 200 ms 8 parts 1 procs 0 hist",
    ]
    out = capsys.readouterr().out
    # One partition: runs beside windows 1-2 and 3-4, CPU 0.6 / 0.15 and 0.6 / 0.35 ms.
    assert ("0 ms, 1 partition(s), 2 runs: CPU per turn 1.7-4.0 x the save's client CPU "
            "(median 2.86), 0.17-0.40 x the save rate (median 0.29)") in out
    assert ("0 ms, 8 partition(s), 2 runs: CPU per turn 1.3-2.4 x the save's client CPU "
            "(median 1.87), 0.13-0.24 x the save rate (median 0.19)") in out


def test_repeated_runs_alternate_with_the_long_history_row_and_the_targets_take_medians(
    recorder: _Recorder, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--repeat`` repeats the long-history row too, between the fresh ones, each beside its
    own windows; the 100-turn target is the median of its runs, not the last one."""
    args = _args(latencies="0", partitions="8", repeat=2, processes=0, long_turns=100)
    assert e2e_bench.run(args) == 0
    assert recorder.events == [
        "window 1",
        "run 0 ms 8 parts 1 procs 0 hist",
        "window 2",
        "run 0 ms 8 parts 1 procs 100 hist",
        "window 3",
        "run 0 ms 8 parts 1 procs 0 hist",
        "window 4",
        "run 0 ms 8 parts 1 procs 100 hist",
        "window 5",
    ]
    out = capsys.readouterr().out
    # Fresh beside windows 1-2 and 3-4 (0.15 and 0.35 ms a save); 100 turns in beside 2-3 and
    # 4-5 (0.25 and 0.45 ms).
    assert ("0 ms, 8 partition(s), 2 runs: CPU per turn 1.7-4.0 x the save's client CPU "
            "(median 2.86), 0.17-0.40 x the save rate (median 0.29)") in out
    assert ("0 ms, 8 partition(s), sessions 100 turns in, 2 runs: CPU per turn 1.3-2.4 x the "
            "save's client CPU (median 1.87), 0.13-0.24 x the save rate (median 0.19)") in out
    assert ("  0 ms, sessions 100 turns in: CPU per turn 1.87 (median of 2: 1.33-2.40) x the "
            "save's client CPU, met (at most 2.3)") in out


def test_a_single_run_per_partition_count_gives_no_spread(
    recorder: _Recorder, capsys: pytest.CaptureFixture[str]
) -> None:
    assert e2e_bench.run(_args(latencies="0", partitions="1,8", processes=0)) == 0
    assert " runs: CPU per turn" not in capsys.readouterr().out


def test_repeat_must_be_at_least_one(recorder: _Recorder) -> None:
    with pytest.raises(SystemExit, match="--repeat must be at least 1, got 0"):
        e2e_bench.run(_args(repeat=0))
    assert recorder.events == []
