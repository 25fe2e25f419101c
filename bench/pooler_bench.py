"""CPU per turn with the database direct and through PgBouncer in transaction mode.

The end-to-end benchmark's run (bench/e2e_bench.py: one ``turnflow consume`` process, a backlog
then a paced phase, 0 ms model latency) alternates between two consumers: one on the database
directly, one through Debian's PgBouncer in transaction mode with ``DATABASE_POOLER=transaction``
(store/pooler.py: no statement named or cached, each parsed again where it runs). Per mode and
round it prints turns/s, the consumer's CPU per turn, PgBouncer's own CPU per turn and the
PostgreSQL server's (when it runs on this host), then the median of each.

    python -m bench.pooler_bench [--rounds 3] [--sessions 200] [--inputs 400]
        [--pool-size 10] [--partitions 8]

Servers as the end-to-end benchmark finds them (``DATABASE_URL``, else an embedded
PostgreSQL; the embedded broker unless ``--kafka``). PgBouncer: ``apt-get install pgbouncer``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
from contextlib import ExitStack
from pathlib import Path

from bench import e2e_bench
from bench.harness.processes import cpu_seconds
from bench.harness.report import servers_line
from bench.harness.servers import broker_servers, start_servers
from tests.fixtures.pgbouncer import _BINARY_PLACES, transaction_pooler

MODES = ("direct", "pgbouncer")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each mode, alternating")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--inputs", type=int, default=400, help="backlog inputs per run")
    parser.add_argument("--paced-seconds", type=float, default=4.0)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--max-in-flight", type=int, default=64)
    parser.add_argument("--pool-size", type=int, default=10,
                        help="PgBouncer's server connections (default_pool_size)")
    parser.add_argument("--kafka", action="store_true",
                        help="Apache Kafka (tests/fixtures/kafka_server.py), not Tansu")
    args = parser.parse_args()
    if args.rounds < 1:
        raise SystemExit(f"--rounds must be at least 1, got {args.rounds}")
    if not shutil.which("pgbouncer") and not any(Path(p).exists() for p in _BINARY_PLACES):
        raise SystemExit("pgbouncer is not installed: apt-get install pgbouncer")
    rows: dict[str, list[tuple[float, float, float, float | None]]] = {m: [] for m in MODES}
    with ExitStack() as stack:
        servers = start_servers(stack)
        if args.kafka:
            servers = broker_servers(stack, servers.database_url, servers.where,
                                                "kafka")
        pooler = stack.enter_context(
            transaction_pooler(servers.database_url, pool_size=args.pool_size)
        )
        print(servers_line(servers) + f"PgBouncer transaction mode, {args.pool_size} server "
              f"connections; {args.sessions} sessions, {args.inputs} inputs, "
              f"{args.partitions} partitions, MAX_IN_FLIGHT={args.max_in_flight}", flush=True)
        for round_ in range(args.rounds):
            for mode in MODES:
                env = ({} if mode == "direct" else
                       {"DATABASE_URL": pooler.url, "DATABASE_POOLER": "transaction"})
                bouncer_before = cpu_seconds(pooler.pid)
                result = asyncio.run(e2e_bench.run_once(
                    servers, latency_ms=0, partitions=args.partitions, sessions=args.sessions,
                    inputs=args.inputs, paced_seconds=args.paced_seconds,
                    max_in_flight=args.max_in_flight, consumer_env=env,
                ))
                # PgBouncer's CPU over the whole run (backlog and paced phases), per input.
                turns = result.inputs + result.paced_inputs
                bouncer = (cpu_seconds(pooler.pid) - bouncer_before) * 1000 / turns
                rows[mode].append((result.turns_per_s, result.cpu_ms_per_turn, bouncer,
                                   result.db_cpu_ms_per_turn))
                db = ("-" if result.db_cpu_ms_per_turn is None
                      else f"{result.db_cpu_ms_per_turn:.2f}")
                print(f"  round {round_ + 1} {mode:>9}: {result.turns_per_s:6.0f} turns/s, "
                      f"consumer {result.cpu_ms_per_turn:.2f} ms CPU/turn, pgbouncer "
                      f"{bouncer:.2f}, postgres {db}; p50 {result.p50_ms:.0f} ms, "
                      f"troubles {result.troubles or 'none'}", flush=True)
    print("\nmedians:")
    for mode in MODES:
        rate, cpu, bouncer, db = (statistics.median(c) if None not in c else None
                                  for c in zip(*rows[mode], strict=True))
        print(f"  {mode:>9}: {rate:6.0f} turns/s, consumer {cpu:.2f} ms CPU/turn, pgbouncer "
              f"{bouncer:.2f}, postgres {'-' if db is None else f'{db:.2f}'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
