"""A quantile of measured values, the one definition every benchmark reports."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["percentile"]


def percentile(values: Iterable[float], share: float) -> float:
    """The ``share`` quantile by linear interpolation between the closest ranks (numpy's
    default); nan for no values."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = share * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
