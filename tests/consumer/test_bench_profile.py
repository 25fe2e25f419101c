"""The end-to-end benchmark's profile summary counts each sampled second once.

pyinstrument keeps a frame's own time both on the frame (``total_self_time``) and on the
synthetic ``[self]`` child it adds under it; summing both printed every second twice."""

from __future__ import annotations

import time
from pathlib import Path

from pyinstrument import Profiler

from consumer.cli.bench import _load


def _busy(seconds: float) -> int:
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += sum(range(50))
    return n


def test_the_categories_add_up_to_the_sampled_time(tmp_path: Path) -> None:
    bench = _load()
    assert bench is not None, "the benchmark ships with the source tree"
    profiler = Profiler(interval=0.001)
    profiler.start()
    _busy(0.3)
    session = profiler.stop()
    path = tmp_path / "profile.pyisession"
    session.save(str(path))

    totals = bench.profile_summary(path)

    assert session.duration > 0.25
    assert abs(sum(totals.values()) - session.duration) < 0.05 * session.duration
