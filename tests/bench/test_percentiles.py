"""The one percentile every benchmark reports."""

from __future__ import annotations

import math

import pytest

from bench.harness.percentiles import percentile


def test_percentile_interpolates_between_ranks() -> None:
    values = [10.0, 20.0, 30.0, 40.0, 50.0]
    assert percentile(values, 0.5) == 30.0
    assert percentile(values, 0.0) == 10.0
    assert percentile(values, 1.0) == 50.0
    assert percentile(values, 0.95) == pytest.approx(48.0)
    assert percentile(reversed(values), 0.25) == 20.0  # order of the input does not matter
    assert math.isnan(percentile([], 0.5))
