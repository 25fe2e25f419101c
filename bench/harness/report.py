"""How a benchmark's run is introduced and its spreads are told, the same way in every
benchmark: which servers, how many CPUs, then the run's own settings."""

from __future__ import annotations

import os
import statistics

from bench.harness.servers import Servers

__all__ = ["servers_line", "spread"]


def servers_line(servers: Servers) -> str:
    """``servers: <where they came from>; <N> CPUs; `` (the run's settings follow)."""
    return f"servers: {servers.where}; {os.cpu_count()} CPUs; "


def spread(values: list[float]) -> str:
    """One figure measured in several runs: ``2.41 (median of 3: 2.02-2.67)``, or the value
    alone for one run."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return f"{ordered[0]:.2f}"
    return f"{statistics.median(ordered):.2f} (median of {len(ordered)}: " \
        f"{ordered[0]:.2f}-{ordered[-1]:.2f})"
