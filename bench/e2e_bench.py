"""End-to-end benchmark: one ``turnflow consume`` process, real PostgreSQL and broker.

For each simulated model latency (0, 200, 1,000 ms per call) and partition count (1, 8), on
fresh topics and a fresh consumer group, over 1,000 sessions:

1. backlog: the inputs wait on ``inbound.turns`` before the consumer starts; turns/s is the
   count over the time from the first reply to the last (all on ``outbound.messages``);
2. paced: inputs arrive at 70% of that rate (or at ``--paced-rate``) for a few seconds;
   input-to-outbound latency is the reply record's timestamp minus its input record's
   timestamp (both set by the producers when they send, on this machine), p50/p95/p99 over
   every input of the phase.

The latency runs are compared with the bound ``MAX_IN_FLIGHT / (calls per turn x latency)``.
Each one-process 0 ms run is compared with the store benchmark's save transaction
(``bench.harness.saves``, same database, as many clients as the consumer's pool),
measured for ``SAVE_WINDOW_S`` right before and right after that run (a window between two
such runs serves both): on a host whose speed swings between minutes, a ratio of a run at the
start to a save measured after every other run would say more about the host than about the
consumer. ``--repeat N`` runs those 0 ms rows N times, alternating partition counts and the
long-history row, and adds the spread and median of their ratios (the targets take medians).
Each is also given the time the consumer's garbage collections took over the backlog (its
``turnflow_gc_seconds_total``, one process only).
Finally one more 0 ms run under pyinstrument says where the consumer's time goes (engine,
serialization, database, broker, the stand-in model).

``--history-turns N`` starts every session N turns into its conversation, so each load reads
and each turn sends a history as long as such a conversation has (by default sessions start
empty and stay a few turns long); the table's ``hist`` column says N. One more 0 ms row does
that for ``--long-turns`` (default 100: twice the consumer's whole history window, so the row
shows a turn's cost stays bounded once the window is full; 0 skips it).

The run ends with the targets, each a ratio of this run: CPU per turn against the save's client
CPU and turns/s against the save rate, fresh and with history; the 200 ms rows against their
bound; and, for ``--processes N``, turns per second of consumer CPU (the consumer processes'
own user+system time, not the broker's, PostgreSQL's or this load generator's, which share
the host) for one process and for N side by side.

    python -m bench.e2e_bench [--quick] [--latencies 0,200,1000] [--partitions 1,8]
    turnflow bench [same options]

Servers: ``DATABASE_URL`` (a scratch database is created there and dropped), else an embedded
PostgreSQL; ``KAFKA_BOOTSTRAP_SERVERS``, else the embedded broker. Load goes to those servers
only, and every phase ends after a bounded time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import uuid
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import REPO
from bench.harness.databases import scratch_database
from bench.harness.history import seed_history
from bench.harness.percentiles import percentile
from bench.harness.ports import free_port
from bench.harness.processes import ConsumerProcess, cpu_seconds, database_cpu_seconds
from bench.harness.report import servers_line, spread
from bench.harness.saves import saves_per_second
from bench.harness.servers import Servers, broker_servers, start_servers
from bench.harness.stand_in_model import AGENT, LATENCY_ENV, calls_per_turn
from bench.harness.topics import fresh_topics
from bench.harness.traffic import InputProducer, ReplyReader

PACED_LOAD = 0.7  # offered rate of the paced phase, as a share of the backlog rate
SAVE_WINDOW_S = 4.0  # each measurement of the save transaction beside a 0 ms run


# -- one run ----------------------------------------------------------------------------------


@dataclass
class RunResult:
    latency_ms: int
    partitions: int
    inputs: int
    turns_per_s: float
    cpu_ms_per_turn: float
    paced_rate: float
    paced_inputs: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    profile: str | None = None
    workers: int = 1
    history_turns: int = 0  # earlier turns every session had before the run
    # The database server's CPU per turn over the same window, when it runs on this host.
    db_cpu_ms_per_turn: float | None = None
    # WAL the server wrote (its whole cluster) and the scratch database's growth, per turn,
    # over the same window: what a deployment's disk, replication and backups pay a turn.
    wal_bytes_per_turn: float | None = None
    db_bytes_per_turn: float | None = None
    # Record bytes (keys and values) per turn over the backlog: the input the consumer read,
    # and the replies it wrote to ``outbound.messages`` (its timers' records are not counted).
    kafka_in_bytes_per_turn: float | None = None
    kafka_out_bytes_per_turn: float | None = None
    # Log lines that mean a turn did not simply run once (see ConsumerProcess.TROUBLES).
    troubles: dict[str, int] = field(default_factory=dict)
    # The consumer's time in garbage collections per turn over the backlog (one process only:
    # read from its turnflow_gc_seconds_total).
    gc_ms_per_turn: float | None = None






async def _wal_and_size(url: str) -> tuple[int, int] | None:
    """The server's WAL position and the database's size, in bytes; None when unreadable
    (a role without the right to read them)."""
    import asyncpg

    from store.urls import plain_url

    try:
        connection = await asyncpg.connect(plain_url(url))
    except (OSError, asyncpg.PostgresError):
        return None
    try:
        row = await connection.fetchrow(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint AS wal,"
            " pg_database_size(current_database()) AS size")
    except asyncpg.PostgresError:
        return None
    finally:
        await connection.close()
    return None if row is None else (int(row["wal"]), int(row["size"]))


async def _gc_seconds(port: int | None) -> float | None:
    """The consumer's ``turnflow_gc_seconds_total`` summed over generations; None without a
    metrics port or when it does not answer."""
    if port is None:
        return None
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    try:
        async with httpx.AsyncClient(timeout=5) as client:
            text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    except httpx.HTTPError:
        return None
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "turnflow_gc_seconds"
        for sample in family.samples
        if sample.name == "turnflow_gc_seconds_total"
    )


async def run_once(
    servers: Servers, *, latency_ms: int, partitions: int, sessions: int, inputs: int,
    paced_seconds: float, max_in_flight: int, profile_to: Path | None = None,
    fetch_max_wait_ms: int | None = None, workers: int = 1, history_turns: int = 0,
    paced_rate: float | None = None, consumer_env: dict[str, str] | None = None,
) -> RunResult:
    """One backlog phase and one paced phase against a fresh ``consume`` (``workers``
    processes), each session ``history_turns`` turns into its conversation. The paced phase
    offers ``paced_rate`` inputs a second, else ``PACED_LOAD`` of the backlog's rate.
    ``consumer_env``: settings of the consumer's own on top (its ``DATABASE_URL`` through a
    pooler, say); the benchmark's own statements still go to ``servers.database_url``."""
    topics = await fresh_topics(servers, partitions)
    metrics_port = free_port() if workers == 1 else None
    env = dict(os.environ)
    env.pop("TURNFLOW_CRASH_AT", None)
    env.update(topics)
    env.update({
        "PYTHONPATH": str(REPO),
        "DATABASE_URL": servers.database_url,
        "KAFKA_BOOTSTRAP_SERVERS": servers.bootstrap,
        "GROUP_ID": f"bench-{uuid.uuid4().hex[:8]}",
        "AGENT": AGENT,
        LATENCY_ENV: str(latency_ms),
        "MAX_IN_FLIGHT": str(max_in_flight),
        # One process serves its metrics, for its garbage collection time; workers none.
        "METRICS_PORT": str(metrics_port or 0),
        "METRICS_HOST": "127.0.0.1",
        "CONSUME_WORKERS": str(workers),
        "KAFKA_IDEMPOTENT_PRODUCER": "false" if servers.embedded_broker else "true",
        # One turn per input: the figures are per input, and each input's reply is awaited.
        "MERGE_BURSTS": "false",
    })
    env.update(consumer_env or {})
    if fetch_max_wait_ms is not None:
        env["KAFKA_FETCH_MAX_WAIT_MS"] = str(fetch_max_wait_ms)
    elif servers.embedded_broker:
        # As `turnflow dev` does: the embedded broker holds an empty fetch for the whole wait.
        env["KAFKA_FETCH_MAX_WAIT_MS"] = "10"
    run = uuid.uuid4().hex[:6]
    session_ids = [f"bench-{run}-{i}" for i in range(sessions)]
    if history_turns:
        await seed_history(servers.database_url, session_ids, history_turns)
    producer = InputProducer(servers.bootstrap, topics["INBOUND_TOPIC"], session_ids)
    replies = ReplyReader(servers.bootstrap, topics["MESSAGES_TOPIC"])
    consumer = ConsumerProcess(env, profile_to)
    await producer.start()
    await replies.start()
    try:
        backlog = await producer.send(inputs)
        await consumer.start()
        cpu_before = cpu_seconds(consumer.pid)
        gc_before = await _gc_seconds(metrics_port)
        db_before = database_cpu_seconds(servers.database_url)
        disk_before = await _wal_and_size(servers.database_url)
        # Generous bound: the model alone needs inputs x calls x latency / max_in_flight.
        within = 60 + inputs * 2 * latency_ms / 1000 / max_in_flight * 3
        await replies.until(backlog, within=within)
        replied_bytes, input_bytes = replies.bytes_read, producer.bytes_sent
        cpu = cpu_seconds(consumer.pid) - cpu_before
        gc_after = await _gc_seconds(metrics_port)
        gc = None if gc_before is None or gc_after is None else gc_after - gc_before
        db_after = database_cpu_seconds(servers.database_url)
        db_cpu = None if db_before is None or db_after is None else db_after - db_before
        disk_after = await _wal_and_size(servers.database_url)
        grown = (None if disk_before is None or disk_after is None
                 else (disk_after[0] - disk_before[0], disk_after[1] - disk_before[1]))
        stamps = [replies.first_reply_ms[i] for i in backlog]
        span_s = max(1e-3, (max(stamps) - min(stamps)) / 1000)
        rate = (len(backlog) - 1) / span_s

        offered = max(1.0, paced_rate if paced_rate is not None else rate * PACED_LOAD)
        paced = await producer.paced(offered, paced_seconds)
        await replies.until(paced, within=60 + paced_seconds * 3)
        latencies = [replies.first_reply_ms[i] - producer.sent_ms[i] for i in paced]
    finally:
        await consumer.stop()
        await replies.stop()
        await producer.stop()
    return RunResult(
        latency_ms=latency_ms, partitions=partitions, inputs=len(backlog), turns_per_s=rate,
        cpu_ms_per_turn=cpu * 1000 / len(backlog), paced_rate=offered,
        db_cpu_ms_per_turn=None if db_cpu is None else db_cpu * 1000 / len(backlog),
        paced_inputs=len(paced), p50_ms=percentile(latencies, 0.50),
        p95_ms=percentile(latencies, 0.95), p99_ms=percentile(latencies, 0.99),
        workers=workers, history_turns=history_turns, troubles=dict(consumer.troubles),
        gc_ms_per_turn=None if gc is None else gc * 1000 / len(backlog),
        wal_bytes_per_turn=None if grown is None else grown[0] / len(backlog),
        db_bytes_per_turn=None if grown is None else grown[1] / len(backlog),
        kafka_in_bytes_per_turn=input_bytes / len(backlog),
        kafka_out_bytes_per_turn=replied_bytes / len(backlog),
    )


# -- profile ----------------------------------------------------------------------------------

# Checked leaf first; the first match names where a sample's time went. A sample with an engine
# frame anywhere on its stack is engine time (the engine calls neither database nor broker).
_CATEGORIES = (
    ("serialization", ("/json/", "pydantic", "jsoncodec", "encode_payload")),
    ("database", ("sqlalchemy", "asyncpg", "/store/")),
    ("broker", ("aiokafka", "kafka")),
    ("waiting on I/O (idle)", ("selectors.py",)),
    ("logging", ("/logging/", "consumer/logs.py")),
    ("event loop", ("/asyncio/",)),
    ("consumer", ("/consumer/",)),
)


_ENGINE_DIR = f"{REPO / 'engine'}/"  # the project's engine, not sqlalchemy/engine/
_RULES = f"{REPO / 'engine' / 'providers' / 'rules.py'}:"
# LatencyProvider.generate and its inner call: the harness's own wrapper in the model's place.
_STAND_IN = tuple(f"{REPO / 'bench' / 'harness' / 'stand_in_model.py'}:{name}"
                  for name in ("generate", "call"))


def _category(path: list[str]) -> str:
    # Importing modules at start-up is not a turn's cost, whichever package is imported.
    if any(p.endswith(":_find_and_load") for p in path):
        return "start-up (imports)"
    # The offline rule provider, behind this benchmark's latency wrapper, answers in the
    # model's place: its work is the model's, not the engine's (a hosted model costs this
    # process only the HTTP call, which the engine's `observed` wraps as it wraps the wrapper).
    if any(p.startswith(_RULES) or p in _STAND_IN for p in path):
        return "model (offline stand-in)"
    if any(p.startswith(_ENGINE_DIR) for p in path):
        return "engine"
    for entry in reversed(path):
        for name, needles in _CATEGORIES:
            if any(n in entry for n in needles):
                return name
    return "other"


def profile_summary(session_file: Path) -> Counter[str]:
    """Seconds of the consumer's wall time per category, from a pyinstrument session.

    A frame's ``total_self_time`` already holds the time of its synthetic children (the
    ``[self]`` and ``[await]`` frames pyinstrument adds under it), so those are skipped: counted
    again, every second would appear twice (the shares stay the same, the seconds do not)."""
    from pyinstrument.session import Session

    session = Session.load(str(session_file))
    totals: Counter[str] = Counter()
    root = session.root_frame()
    if root is None:
        return totals
    stack: list[tuple[Any, list[str]]] = [(root, [])]
    while stack:
        frame, path = stack.pop()
        here = [*path, f"{frame.file_path or ''}:{frame.function or ''}"]
        if not frame.is_synthetic and frame.total_self_time:
            totals[_category(here)] += frame.total_self_time
        stack.extend((child, here) for child in frame.children)
    return totals


# -- main -------------------------------------------------------------------------------------


def _store_saves_per_second(url: str, clients: int, seconds: float) -> tuple[float, float]:
    saves, _, cpu_ms = asyncio.run(saves_per_second(url, clients, seconds))
    return saves, cpu_ms


@dataclass(frozen=True)
class SaveBaseline:
    """The save transaction measured either side of one run: saves/s and client CPU ms per
    save, each the mean of the two windows."""

    before: tuple[float, float]
    after: tuple[float, float]

    @property
    def saves_per_s(self) -> float:
        return (self.before[0] + self.after[0]) / 2

    @property
    def cpu_ms(self) -> float:
        return (self.before[1] + self.after[1]) / 2

    def ratios(self, run: RunResult) -> tuple[float, float]:
        """``run``'s CPU per turn over the save's client CPU, and its turns/s over the saves/s."""
        return run.cpu_ms_per_turn / self.cpu_ms, run.turns_per_s / self.saves_per_s


def repeated_summary(
    results: list[RunResult], baselines: dict[int, SaveBaseline], history_turns: int
) -> list[str]:
    """For each partition count and history length with more than one 0 ms run beside its
    save windows: the spread and median of the runs' ratios to the save (``history_turns``,
    the run's own, is left unsaid; another, the long-history row's, is named)."""
    by_row: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for index, base in baselines.items():
        r = results[index]
        by_row.setdefault((r.partitions, r.history_turns), []).append(base.ratios(r))
    lines = []
    for (partitions, turns), ratios in by_row.items():
        if len(ratios) < 2:
            continue
        cpu = sorted(c for c, _ in ratios)
        rate = sorted(t for _, t in ratios)
        long = "" if turns == history_turns else f", sessions {turns} turns in"
        lines.append(
            f"  0 ms, {partitions} partition(s){long}, {len(ratios)} runs: CPU per turn "
            f"{cpu[0]:.1f}-{cpu[-1]:.1f} x the save's client CPU (median "
            f"{statistics.median(cpu):.2f}), {rate[0]:.2f}-{rate[-1]:.2f} x the save rate "
            f"(median {statistics.median(rate):.2f})"
        )
    return lines


def _per_cpu_second(r: RunResult) -> float:
    """Turns per second of the consumer processes' own CPU (user+system, the supervisor and
    its workers; the broker, PostgreSQL and the load generator are not counted)."""
    return 1000 / r.cpu_ms_per_turn if r.cpu_ms_per_turn > 0 else float("nan")


def target_lines(
    results: list[RunResult], baselines: dict[int, SaveBaseline], args: argparse.Namespace,
    per_turn: float,
) -> list[str]:
    """The targets this run can speak to, each as its ratio (a median where several rows
    give it) and whether it is met: CPU per turn at 0 ms at most 2.0x the save's client CPU
    on fresh sessions and 2.3x with history; turns/s at 0 ms at least 0.6x the save rate in
    both; at 200 ms at least 1.0 of the bound."""
    def verdict(value: float, wanted: float, most: bool) -> str:
        met = value <= wanted if most else value >= wanted
        return f"{'met' if met else 'NOT met'} ({'at most' if most else 'at least'} {wanted:g})"

    lines: list[str] = []
    by_history: dict[int, list[tuple[float, float]]] = {}
    for index, base in baselines.items():
        by_history.setdefault(results[index].history_turns, []).append(
            base.ratios(results[index])
        )
    for turns, ratios in sorted(by_history.items()):
        cpu = [c for c, _ in ratios]
        rate = [t for _, t in ratios]
        label = "fresh sessions" if turns == 0 else f"sessions {turns} turns in"
        cpu_wanted = 2.0 if turns == 0 else 2.3
        lines.append(f"  0 ms, {label}: CPU per turn {spread(cpu)} x the save's client CPU, "
                     f"{verdict(statistics.median(cpu), cpu_wanted, True)}")
        lines.append(f"  0 ms, {label}: turns/s {spread(rate)} x the save rate, "
                     f"{verdict(statistics.median(rate), 0.6, False)}")
    for latency in sorted({r.latency_ms for r in results if r.latency_ms}):
        bound = _bound(args.max_in_flight, per_turn, latency)
        shares = [r.turns_per_s / bound for r in results
                  if r.latency_ms == latency and r.workers == 1]
        if latency == 200 and shares:
            lines.append(f"  200 ms: turns/s {spread(shares)} of the bound ({bound:.0f}), "
                         f"{verdict(statistics.median(shares), 1.0, False)}")
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="fewer sessions and inputs (200 sessions, 400 inputs, 4 s paced)")
    parser.add_argument("--latencies", default="0,200,1000", help="model latencies, ms per call")
    parser.add_argument("--partitions", default="1,8", help="partition counts")
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--inputs", type=int, default=2000, help="backlog inputs per run")
    parser.add_argument("--paced-seconds", type=float, default=8.0)
    parser.add_argument("--paced-rate", type=float, default=None,
                        help="inputs a second offered in the paced phase (default: 70%% of "
                        "the run's backlog rate); a fixed rate compares latencies of two "
                        "versions at the same load")
    parser.add_argument("--max-in-flight", type=int, default=64)
    parser.add_argument("--no-profile", action="store_true", help="skip the profiled 0 ms run")
    parser.add_argument("--profile-out", type=Path, default=None,
                        help="keep the profiled run's pyinstrument session at this path "
                        "(read it with `pyinstrument --load PATH`)")
    parser.add_argument("--profile-latency", type=float, default=0.0,
                        help="model latency of the profiled run, ms per call (default 0)")
    parser.add_argument("--processes", type=int, default=2,
                        help="consumer processes of the extra 0 ms row compared with one "
                        "(`consume --workers N`; 0 or 1 skips it)")
    parser.add_argument("--history-turns", type=int, default=0,
                        help="earlier turns every session has before the run (each gives two "
                        "history entries; the consumer loads up to 50), default 0")
    parser.add_argument("--long-turns", type=int, default=100,
                        help="one more 0 ms row (most partitions, one process) with every "
                        "session this many turns into its conversation; 0 skips it "
                        "(default 100: the consumer's HISTORY_LIMIT of 50 entries, full "
                        "twice over)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="one-process 0 ms runs per partition count and of the "
                        "--long-turns row, interleaved, each beside its own save windows; with "
                        "more than one, the spread and median of their ratios to the save are "
                        "printed, and the targets take the medians (default 1)")
    parser.add_argument("--brokers", default=None,
                        help="comma-separated brokers to run the latency rows on, side by side "
                        "in one table: tansu (embedded) and kafka (a local Apache Kafka node, "
                        "tests/fixtures/kafka_server.py: Java 17+ and Maven); the save windows, "
                        "extra rows and profile are skipped")
    parser.add_argument("--fetch-max-wait-ms", type=int, default=None,
                        help="the consumer's KAFKA_FETCH_MAX_WAIT_MS (default: 10 on the "
                        "embedded broker, else the environment's or the setting's default)")


def _fetch_wait_shown(given: int | None, servers: Servers) -> str:
    if given is not None:
        return str(given)
    return "10" if servers.embedded_broker else os.environ.get("KAFKA_FETCH_MAX_WAIT_MS", "500")




def _bound(max_in_flight: int, per_turn: float, latency_ms: int) -> float:
    """Turns/s the model's latency allows: ``MAX_IN_FLIGHT / (calls per turn x latency)``."""
    return max_in_flight / (per_turn * latency_ms / 1000)


def _bound_cells(r: RunResult, max_in_flight: int, per_turn: float) -> tuple[str, str]:
    """The table's bound and ratio cells for a row (dashes at 0 ms, which has no bound)."""
    if not r.latency_ms:
        return f"{'-':>7}", f"{'-':>6}"
    bound = _bound(max_in_flight, per_turn, r.latency_ms)
    return f"{bound:7.0f}", f"{r.turns_per_s / bound:6.2f}"


def _bytes_text(r: RunResult) -> str:
    """``, WAL 5.1 KB, database 4.0 KB; Kafka records in 98 B, replies out 402 B`` (what is
    known of the row's bytes per turn)."""
    text = ("" if r.wal_bytes_per_turn is None or r.db_bytes_per_turn is None else
            f", WAL {r.wal_bytes_per_turn / 1024:.1f} KB, database "
            f"{r.db_bytes_per_turn / 1024:.1f} KB")
    if r.kafka_in_bytes_per_turn is not None:
        text += (f"; Kafka records in {r.kafka_in_bytes_per_turn:.0f} B, replies out"
                 f" {r.kafka_out_bytes_per_turn or 0:.0f} B")
    return text


def run_brokers(args: argparse.Namespace, brokers: list[str]) -> int:
    """The latency rows on each broker in turn, one table with a broker column. Everything
    else is the same for every broker: database, agent, sessions, inputs, settings."""
    latencies = [int(x) for x in args.latencies.split(",")]
    partition_counts = [int(x) for x in args.partitions.split(",")]
    per_turn = asyncio.run(calls_per_turn())
    rows: list[tuple[str, RunResult]] = []
    with ExitStack() as stack:
        database = scratch_database(stack, prefix="turnflow-e2e")
        for broker in brokers:
            with ExitStack() as on_broker:
                servers = broker_servers(on_broker, database.url, database.where, broker)
                print(servers_line(servers) + f"MAX_IN_FLIGHT="
                      f"{args.max_in_flight}; {args.sessions} sessions; {args.inputs} backlog "
                      f"inputs per run; KAFKA_FETCH_MAX_WAIT_MS="
                      f"{_fetch_wait_shown(args.fetch_max_wait_ms, servers)}", flush=True)
                for latency in latencies:
                    for partitions in partition_counts:
                        result = asyncio.run(run_once(
                            servers, latency_ms=latency, partitions=partitions,
                            sessions=args.sessions, inputs=args.inputs,
                            paced_seconds=args.paced_seconds, max_in_flight=args.max_in_flight,
                            fetch_max_wait_ms=args.fetch_max_wait_ms,
                            history_turns=args.history_turns, paced_rate=args.paced_rate,
                        ))
                        rows.append((broker, result))
                        print(f"  done: {broker}, {latency} ms, {partitions} partitions, "
                              f"{result.turns_per_s:.0f} turns/s", flush=True)
    print()
    print(f"{'broker':>6} {'model latency':>13} {'parts':>5} {'turns/s':>8} {'bound':>7} "
          f"{'ratio':>6} {'CPU ms/turn':>11} {'paced/s':>8} {'p50 ms':>8} {'p95 ms':>8} "
          f"{'p99 ms':>8}")
    for broker, r in rows:
        bound_text, ratio_text = _bound_cells(r, args.max_in_flight, per_turn)
        print(f"{broker:>6} {r.latency_ms:>10} ms {r.partitions:>5} {r.turns_per_s:>8.0f} "
              f"{bound_text} {ratio_text} {r.cpu_ms_per_turn:>11.2f} {r.paced_rate:>8.0f} "
              f"{r.p50_ms:>8.0f} {r.p95_ms:>8.0f} {r.p99_ms:>8.0f}")
    print("per turn over the backlog: consumer CPU; the database server's CPU (PostgreSQL on "
          "this host), WAL and growth; Kafka record bytes")
    for broker, r in rows:
        db = "" if r.db_cpu_ms_per_turn is None else f", database {r.db_cpu_ms_per_turn:.2f} ms"
        print(f"  {broker}, {r.latency_ms} ms, {r.partitions} partitions: consumer "
              f"{r.cpu_ms_per_turn:.2f} ms{db}{_bytes_text(r)}")
    for broker, r in rows:
        if r.troubles:
            told = ", ".join(f"{count} {name}" for name, count in sorted(r.troubles.items()))
            print(f"  NOTE {broker}, {r.latency_ms} ms, {r.partitions} partitions: not every "
                  f"turn ran once: {told}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.quick:
        args.sessions, args.inputs, args.paced_seconds = 200, 400, 4.0
    if args.brokers:
        return run_brokers(args, [b.strip() for b in args.brokers.split(",") if b.strip()])
    if args.repeat < 1:
        raise SystemExit(f"--repeat must be at least 1, got {args.repeat}")
    latencies = [int(x) for x in args.latencies.split(",")]
    partition_counts = [int(x) for x in args.partitions.split(",")]
    per_turn = asyncio.run(calls_per_turn())
    pool = min(args.max_in_flight, 20)  # the consumer's pool size (turns/clients.py)
    results: list[RunResult] = []
    with ExitStack() as stack:
        servers = start_servers(stack)
        print(servers_line(servers) + f"MAX_IN_FLIGHT="
              f"{args.max_in_flight}; {args.sessions} sessions; {args.inputs} backlog inputs "
              f"per run; {args.history_turns} earlier turns per session; "
              f"model calls per turn: {per_turn:g}; KAFKA_FETCH_MAX_WAIT_MS="
              f"{_fetch_wait_shown(args.fetch_max_wait_ms, servers)}", flush=True)

        windows: list[tuple[float, float]] = []
        baselines: dict[int, SaveBaseline] = {}  # by index in results
        # The window measured right after the last run, while no other run came since: the
        # next compared run takes it as its "before" instead of measuring again.
        fresh: tuple[float, float] | None = None

        def save_window() -> tuple[float, float]:
            nonlocal fresh
            fresh = _store_saves_per_second(servers.database_url, pool, SAVE_WINDOW_S)
            windows.append(fresh)
            return fresh

        def measured(label: str, *, beside_saves: bool = False, **given: Any) -> None:
            """One run with the arguments' settings, ``given`` changed; its result kept. With
            ``beside_saves``, the save transaction is measured right before and after it."""
            nonlocal fresh
            before = (fresh or save_window()) if beside_saves else None
            fresh = None
            settings: dict[str, Any] = {
                "latency_ms": 0, "partitions": max(partition_counts),
                "sessions": args.sessions, "inputs": args.inputs,
                "paced_seconds": args.paced_seconds, "max_in_flight": args.max_in_flight,
                "fetch_max_wait_ms": args.fetch_max_wait_ms,
                "history_turns": args.history_turns, "paced_rate": args.paced_rate,
            } | given
            result = asyncio.run(run_once(servers, **settings))
            results.append(result)
            if before is not None:
                baselines[len(results) - 1] = SaveBaseline(before, save_window())
            print(f"  done: {label}, {result.turns_per_s:.0f} turns/s", flush=True)

        long_row = args.long_turns > 0 and args.long_turns != args.history_turns
        for latency in latencies:
            # The 0 ms rows are the ones compared with the save; repeated, they alternate
            # between partition counts and the long-history row, so that each sees the same
            # minutes of the host, and the targets take the median of the runs.
            for _ in range(args.repeat if latency == 0 else 1):
                for partitions in partition_counts:
                    measured(f"{latency} ms, {partitions} partitions", beside_saves=latency == 0,
                             latency_ms=latency, partitions=partitions)
                if latency == 0 and long_row:
                    measured(f"0 ms, {max(partition_counts)} partitions, sessions "
                             f"{args.long_turns} turns in", beside_saves=True,
                             history_turns=args.long_turns)
        if args.processes > 1 and 0 in latencies:
            measured(f"0 ms, {max(partition_counts)} partitions, {args.processes} processes",
                     workers=args.processes)
        if not windows:  # no 0 ms run to compare: the save transaction alone, once
            save_window()
        profile: Counter[str] | None = None
        if not args.no_profile:
            profile_file = args.profile_out or (
                Path(stack.enter_context(tempfile.TemporaryDirectory())) / "p.pyisession"
            )
            asyncio.run(run_once(
                servers, latency_ms=args.profile_latency, partitions=max(partition_counts),
                sessions=args.sessions, inputs=args.inputs, paced_seconds=1.0,
                max_in_flight=args.max_in_flight, profile_to=profile_file,
                fetch_max_wait_ms=args.fetch_max_wait_ms, history_turns=args.history_turns,
            ))
            profile = profile_summary(profile_file)

    print()
    print(f"{'model latency':>13} {'parts':>5} {'procs':>5} {'hist':>4} {'turns/s':>8} "
          f"{'bound':>7} {'ratio':>6} {'CPU ms/turn':>11} {'paced/s':>8} {'p50 ms':>8} "
          f"{'p95 ms':>8} {'p99 ms':>8}")
    for r in results:
        bound_text, ratio_text = _bound_cells(r, args.max_in_flight, per_turn)
        print(f"{r.latency_ms:>10} ms {r.partitions:>5} {r.workers:>5} {r.history_turns:>4} "
              f"{r.turns_per_s:>8.0f} "
              f"{bound_text} {ratio_text} {r.cpu_ms_per_turn:>11.2f} {r.paced_rate:>8.0f} "
              f"{r.p50_ms:>8.0f} {r.p95_ms:>8.0f} {r.p99_ms:>8.0f}")
    for r in results:
        if r.troubles:
            told = ", ".join(f"{count} {name}" for name, count in sorted(r.troubles.items()))
            print(f"  NOTE {r.latency_ms} ms, {r.partitions} partitions, {r.workers} "
                  f"process(es): not every turn ran once: {told}")
    print()
    rates = [w[0] for w in windows]
    cpus = [w[1] for w in windows]
    print(f"store save transaction alone ({pool} clients, one process, {len(windows)} window(s) "
          f"of {SAVE_WINDOW_S:g} s): {min(rates):.0f}-{max(rates):.0f} saves/s, "
          f"{min(cpus):.2f}-{max(cpus):.2f} ms client CPU per save")
    if baselines:
        print("  each 0 ms run against the mean of the windows right before and after it:")
    for index, r in enumerate(results):
        base = baselines.get(index)
        if base is None:
            continue
        long = "" if r.history_turns == args.history_turns else (
            f", sessions {r.history_turns} turns in"
        )
        cpu_ratio, rate_ratio = base.ratios(r)
        print(f"  0 ms, {r.partitions} partition(s){long}: {r.turns_per_s:.0f} turns/s = "
              f"{rate_ratio:.2f} x the save rate "
              f"({base.saves_per_s:.0f} saves/s); CPU per turn {r.cpu_ms_per_turn:.2f} ms = "
              f"{cpu_ratio:.1f} x the save's client CPU "
              f"({base.cpu_ms:.2f} ms)" + ("" if r.gc_ms_per_turn is None else
              f", {r.gc_ms_per_turn:.3f} ms of it in garbage collections"))
    for line in repeated_summary(results, baselines, args.history_turns):
        print(line)
    if any(r.db_cpu_ms_per_turn is not None for r in results):
        print("the database server's CPU per turn over the same backlog (PostgreSQL on this "
              "host):")
        for r in results:
            if r.db_cpu_ms_per_turn is not None:
                print(f"  {r.latency_ms} ms, {r.partitions} partition(s), {r.workers} "
                      f"process(es), sessions {r.history_turns} turns in: "
                      f"{r.db_cpu_ms_per_turn:.2f} ms" + _bytes_text(r))
    single = {
        r.partitions: r
        for r in results
        if r.latency_ms == 0 and r.workers == 1 and r.history_turns == args.history_turns
    }
    for r in results:
        if r.workers > 1 and r.partitions in single:
            one = single[r.partitions]
            print(f"  0 ms, {r.partitions} partitions, {r.workers} processes: "
                  f"{r.turns_per_s:.0f} turns/s = {r.turns_per_s / one.turns_per_s:.2f} x one "
                  f"process ({one.turns_per_s:.0f} turns/s); per second of consumer CPU "
                  f"(the consumer processes' own): {_per_cpu_second(r):.0f} turns against "
                  f"{_per_cpu_second(one):.0f} for one process "
                  f"({_per_cpu_second(r) / _per_cpu_second(one):.2f} x)")
    lines = target_lines(results, baselines, args, per_turn)
    if lines:
        print()
        print("targets, each a ratio of this run:")
        for line in lines:
            print(line)
    if profile:
        total = sum(profile.values())
        aside = ("waiting on I/O (idle)", "start-up (imports)")
        busy = total - sum(profile.get(name, 0.0) for name in aside)
        print()
        print(f"where the consumer's time goes at {args.profile_latency:g} ms "
              f"({max(partition_counts)} partitions, "
              f"pyinstrument, {total:.1f} s sampled wall time; busy excludes idle and "
              "start-up):")
        for name, seconds in profile.most_common():
            share_busy = "" if name in aside else f"{seconds / busy:6.1%} of busy"
            print(f"  {name:<24} {seconds:7.2f} s {seconds / total:6.1%}  {share_busy}")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))


if __name__ == "__main__":
    main()
