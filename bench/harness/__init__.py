"""What the benchmarks share, one module per job:

- ``databases``: a throwaway migrated database on ``DATABASE_URL`` or an embedded PostgreSQL;
- ``servers``: that database with a broker (embedded Tansu, ``KAFKA_BOOTSTRAP_SERVERS``, or
  an Apache Kafka node on this host);
- ``topics``: a fresh set of the consumer's topics for one run;
- ``stand_in_model``: the offline model behind a fixed delay, and the agent the benchmarks run;
- ``history``: sessions seeded some turns into their conversation;
- ``registry``: agents in the hosting registry, one per workspace;
- ``saves``: the save transaction a consumer makes for a turn, alone, the yardstick of a turn;
- ``turn_work``: inputs for the consumer's pipeline run in-process;
- ``processes``: a ``turnflow consume`` process under load, and the CPU a process (or
  PostgreSQL) spent;
- ``traffic``: inputs produced to ``inbound.turns`` and the replies read back;
- ``percentiles`` and ``ports``: a quantile of measurements, a free local port;
- ``report``: the line that opens a run (servers, CPUs, its settings), a figure's spread.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["REPO"]

REPO = Path(__file__).resolve().parents[2]
"""The root of the source checkout the benchmarks run from."""
