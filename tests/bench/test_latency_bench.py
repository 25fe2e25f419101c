"""The latency benchmark's own arithmetic: the model's time taken out of each
message, the capacity over a backlog's middle, the arrivals."""

from __future__ import annotations

import math

import pytest

from bench.latency_bench import (
    arrival_gaps,
    model_ms_per_input,
    service_only_ms,
    steady_rate,
)


def test_model_time_is_summed_per_message_named_in_the_words() -> None:
    calls = [
        (100.0, 100.2, "oi lat-abc123-p0-1"),
        (101.0, 101.25, "oi lat-abc123-p0-1"),  # a second call for the same message
        (102.0, 102.2, "oi lat-abc123-p1-7"),
        (103.0, 103.2, "no message named here"),
    ]
    spent = model_ms_per_input(calls)
    assert spent == {
        "lat-abc123-p0-1": pytest.approx(450.0),
        "lat-abc123-p1-7": pytest.approx(200.0),
    }


def test_service_only_takes_the_model_out_and_skips_unanswered() -> None:
    sent = {"a": 1_000, "b": 2_000, "c": 3_000}
    replied = {"a": 1_215, "b": 2_460}
    model = {"a": 201.5, "b": 400.0}
    assert service_only_ms(sent, replied, model) == {"a": 13.5, "b": 60.0}
    # A message whose calls the stand-in did not log keeps its whole time.
    assert service_only_ms({"d": 0}, {"d": 30}, {}) == {"d": 30.0}


def test_steady_rate_leaves_out_the_ramp_and_the_tail() -> None:
    # 100 replies 10 ms apart, then a straggler 5 s later: the middle says 100/s.
    stamps = [i * 10 for i in range(100)] + [6_000]
    assert steady_rate(stamps) == pytest.approx(100.0)
    assert math.isnan(steady_rate([1, 2]))


def test_arrivals_average_the_rate_and_fixed_ones_are_equal() -> None:
    gaps = list(arrival_gaps(50.0, 20_000, "poisson", seed=3))
    assert sum(gaps) / len(gaps) == pytest.approx(1 / 50, rel=0.03)
    assert len(set(gaps)) > 1000
    assert list(arrival_gaps(4.0, 3, "fixed", seed=3)) == [0.25, 0.25, 0.25]


def test_breakdown_splits_a_message_into_its_steps_and_takes_the_model_out() -> None:
    """One message's notes, as bench/turn_times.py writes them, become the parts of its
    service-only time; the loop's lag and the commits are read beside them."""
    import json
    from types import SimpleNamespace

    from bench.latency_bench import LoadResult, breakdown

    m = "lat-abc123-p0-1"
    steps = [(10.000, "fetched"), (10.001, "permit"), (10.001, "permitted"), (10.001, "load"),
             (10.004, "loaded"), (10.005, "slot"), (10.005, "slotted"), (10.215, "save"),
             (10.220, "saved"), (10.220, "publish"), (10.221, "published")]
    lines = [json.dumps([t, step, m]) for t, step in steps]
    lines += [json.dumps([10.1, "lag", "2.50"]), json.dumps([10.1, "commit", ""]),
              json.dumps([10.108, "committed", ""]), json.dumps([99.0, "lag", "50"])]
    load = LoadResult(0.1, 10.0, [m], model_ms={m: 200.0})
    replies = SimpleNamespace(stamps={m: [10_221]})
    parts, commits, lag = breakdown(lines, [load], {m: 9_998}, replies)  # type: ignore[arg-type]
    got = parts["10%"]
    assert got["fetch"] == [pytest.approx(2.0)]
    assert got["load"] == [pytest.approx(3.0)]
    assert got["turn - model"] == [pytest.approx(10.0)]  # 210 ms from slot to save, less 200
    assert got["save"] == [pytest.approx(5.0)]
    assert commits == [pytest.approx(8.0)]
    assert lag == {"10%": [2.5]}  # the sample after the last reply is not the load's
