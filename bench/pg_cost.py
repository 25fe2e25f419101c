"""What a turn costs PostgreSQL, by agent kind: statements, round trips and the whole cluster's CPU.

The benchmark starts its own PostgreSQL 15 (``initdb`` into a temporary directory, a free port,
``shared_preload_libraries=pg_stat_statements``), so that every statement and every CPU tick of
that cluster is the consumer's: nothing else uses it. It then runs ``turnflow consume`` (one
worker process per core unless ``--workers`` says otherwise, the e2e benchmark's stand-in model
answering at once) for each kind of agent:

- ``code``: the e2e benchmark's agent in Python (``AGENT``): a count, one model-phrased reply, a
  one-hour timer;
- ``registry``: an agent stored in the registry (``AGENT_REGISTRY``), its workspace on a plan
  with a per-minute cap of model turns (``PLAN_MODEL_TURNS_PER_MINUTE``), every turn billed to
  the credit ledger: one model-phrased reply, a one-hour timer.

Each run warms the consumer up first (its agents built, its statements prepared), then, over
``--inputs`` inputs on ``--sessions`` conversations (one turn each, bursts not merged), sent at
once (a backlog: turns that run together share their loads and saves) or paced at ``--rate``
a second (turns one at a time), reads around them:

- ``pg_stat_statements``: the statements the server ran, by kind (calls per turn, and their
  execution and planning time per turn);
- round trips: each statement is one exchange with the server (the consumer runs them one at a
  time on asyncpg, outside explicit transactions, each prepared once per connection; a
  ``BEGIN`` or ``COMMIT`` would be a statement of its own), so the statement count is the round
  trip count (through a transaction-mode pooler, where nothing is prepared ahead, twice it);
- the cluster's CPU: user + system time of the postmaster and every process under it (backends,
  checkpointer, WAL writer, autovacuum), from ``/proc``, before and after;
- WAL written.

``--repeat N`` alternates the kinds N times. Nothing else should run on the host meanwhile for
the CPU to mean much; the statement counts do not depend on it.

    python -m bench.pg_cost [--inputs 2000] [--sessions 500] [--repeat 2] [--rate 0]
                            [--broker tansu] [--kinds code,registry] [--against DIR]
    make bench-pg-cost ARGS="..."
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.fairness_bench import STAND_IN_FLAG
from bench.harness.databases import scratch_database
from bench.harness.processes import ConsumerProcess, cpu_seconds, proc_stat
from bench.harness.registry import registry_agent
from bench.harness.servers import Servers, broker_servers
from bench.harness.stand_in_model import LATENCY_ENV
from bench.harness.topics import fresh_topics
from bench.harness.traffic import InputProducer, ReplyReader

REPO = Path(__file__).resolve().parents[1]

PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
WORKSPACE = "bench-ws"
AGENT_ID = "bench-registry"
PLAN = "bench"
# A cap no run reaches: the turn takes one from the minute's counter, as a capped plan's does.
PER_MINUTE = 10_000_000
BENCH_TAG = "/* pg_cost */"  # the benchmark's own statements, left out of the counts
KINDS = ("code", "registry")


# -- the cluster --------------------------------------------------------------------------------


class OwnCluster:
    """A PostgreSQL cluster of this benchmark's own, with pg_stat_statements loaded. As root it
    runs as the ``postgres`` system user (PostgreSQL refuses root)."""

    def __init__(self, stack: ExitStack) -> None:
        from consumer.processes import free_port

        self._root = Path(tempfile.mkdtemp(prefix="turnflow-pgcost-"))
        stack.callback(shutil.rmtree, self._root, ignore_errors=True)
        self.data = self._root / "data"
        self.port = free_port()
        self._user = "postgres" if os.geteuid() == 0 else None
        if self._user is not None:
            shutil.chown(self._root, self._user)
        self._run("initdb", "-D", str(self.data), "--auth=trust", "--encoding=UTF8",
                  "-U", "postgres")
        options = (f"-h 127.0.0.1 -p {self.port} -k {self._root} "
                   "-c shared_preload_libraries=pg_stat_statements "
                   "-c pg_stat_statements.max=10000 -c pg_stat_statements.track_utility=on "
                   "-c max_connections=200")
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "-o", options,
                  "-l", str(self._root / "server.log"), "start")
        stack.callback(self._run, "pg_ctl", "-D", str(self.data), "-w", "-m", "fast", "stop")
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str) -> None:
        subprocess.run([str(PG_BIN / program), *args], check=True, capture_output=True,
                       user=self._user, cwd=self._root, timeout=120)

    @property
    def postmaster(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def cpu_seconds(self) -> float:
        """User + system CPU of the postmaster (with the children it reaped) and of every live
        process under it."""
        pid = self.postmaster
        ticks = 0
        fields = proc_stat(pid)
        if fields is not None:
            ticks += sum(int(fields[i]) for i in (11, 12, 13, 14))
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            child = proc_stat(int(entry.name))
            if child is not None and int(child[1]) == pid:
                ticks += int(child[11]) + int(child[12])
        return ticks / os.sysconf("SC_CLK_TCK")


# -- what the server ran --------------------------------------------------------------------------


_STATEMENTS = f"""{BENCH_TAG}
SELECT s.query, s.calls, s.total_exec_time, s.total_plan_time
FROM pg_stat_statements AS s JOIN pg_database AS d ON d.oid = s.dbid
WHERE d.datname = current_database() AND s.query NOT LIKE '%pg_cost%'
"""


def _kind(query: str) -> str:
    """A short name for a statement: its first words, or what it writes."""
    text = " ".join(query.split())
    known = (
        ("workspace_model_minutes", "per-minute budget take"),
        ("AS unpublished", "load"),
        ("INSERT INTO turns", "save (session, turn log, outbox, ledger)"),
        ("UPDATE outbox", "mark published"),
        ("INSERT INTO source_positions", "source positions (offset commits)"),
        ("typeinfo_tree", "type introspection (a new connection's first statements)"),
        ("set_config", "type introspection (a new connection's first statements)"),
        ("FROM agents", "registry poll"),
        ("FROM workspaces", "registry poll"),
        ("SELECT now()", "registry poll"),
    )
    for needle, name in known:
        if needle in text:
            return name
    return text[:70]


@dataclass
class Measured:
    kind: str
    turns: int
    seconds: float
    cluster_cpu_s: float
    wal_bytes: int
    consumer_cpu_s: float
    statements: dict[str, tuple[int, float]] = field(default_factory=dict)  # calls, ms

    @property
    def per_turn_statements(self) -> float:
        return sum(c for c, _ in self.statements.values()) / self.turns

    @property
    def per_turn_statement_ms(self) -> float:
        return sum(ms for _, ms in self.statements.values()) / self.turns

    @property
    def per_turn_cpu_ms(self) -> float:
        return self.cluster_cpu_s * 1000 / self.turns


async def _read_statements(url: str) -> dict[str, tuple[int, float]]:
    import asyncpg

    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch(_STATEMENTS)
    finally:
        await connection.close()
    found: dict[str, tuple[int, float]] = {}
    for row in rows:
        name = _kind(row["query"])
        calls, ms = found.get(name, (0, 0.0))
        found[name] = (calls + int(row["calls"]),
                       ms + float(row["total_exec_time"]) + float(row["total_plan_time"]))
    return found


async def _server(url: str, sql: str) -> Any:
    import asyncpg

    connection = await asyncpg.connect(url)
    try:
        return await connection.fetchval(f"{BENCH_TAG} {sql}")
    finally:
        await connection.close()


# -- the agents -----------------------------------------------------------------------------------


def registry_definition() -> dict[str, Any]:
    """The registry agent: one model-phrased reply and a one-hour timer a turn (the harness's
    registry agent, under this benchmark's agent id and workspace)."""
    return registry_agent(WORKSPACE) | {"agent_id": AGENT_ID}


async def _store_registry_agent(url: str) -> None:
    from engine.definition import definition_digest
    from store import Store
    from store.hosting import Hosting

    store = await Store.connect(url, pool_size=1, max_overflow=0)
    try:
        hosting = Hosting(store.engine)
        document = registry_definition()
        await hosting.put_version(agent_id=AGENT_ID, workspace=WORKSPACE, document=document,
                                  digest=definition_digest(document), activate=True)
        await hosting.set_workspace(WORKSPACE, plan=PLAN)
    finally:
        await store.close()


class _Consumer(ConsumerProcess):
    """``turnflow consume`` from the source tree ``tree``: the code agent's through
    ``python -m consumer.cli``, the registry's through the fairness benchmark's stand-in
    model (``fairness_bench.consume_with_stand_in``)."""

    def __init__(self, env: dict[str, str], tree: Path, registry: bool) -> None:
        super().__init__(env)
        self._tree = tree
        self._registry = registry

    def command(self) -> tuple[list[str], Path]:
        argv = (_stand_in_consumer(self._tree) if self._registry
                else ["-m", "consumer.cli", "consume"])
        return [sys.executable, *argv], self._tree


def _packaged(tree: Path) -> bool:
    """Whether ``tree``'s benchmarks are a package over ``bench/harness`` (``python -m``)."""
    return (tree / "bench" / "harness").is_dir()


def _stand_in_consumer(tree: Path) -> list[str]:
    """The arguments that run ``tree``'s consumer with the fairness benchmark's stand-in model."""
    if _packaged(tree):
        return ["-m", "bench.fairness_bench", STAND_IN_FLAG]
    return [str(tree / "bench" / "fairness_bench.py"), STAND_IN_FLAG]


class _NamedProducer(InputProducer):
    """Inputs that name the registry agent."""

    def _records(self, count: int) -> Iterator[tuple[str, bytes, bytes]]:
        import json

        for input_id, key, value in super()._records(count):
            record = json.loads(value) | {"agent_id": AGENT_ID}
            yield input_id, key, json.dumps(record).encode()


# -- one run --------------------------------------------------------------------------------------


async def run_kind(
    kind: str, servers: Servers, database_url: str, cluster: OwnCluster,
    args: argparse.Namespace, tree: Path = REPO, label: str | None = None,
) -> Measured:
    topics = await fresh_topics(servers, args.partitions)
    env = dict(os.environ)
    env.pop("TURNFLOW_CRASH_AT", None)
    env.update(topics)
    env.update({
        # A tree from before bench/ was a package found its benchmarks' modules on the path.
        "PYTHONPATH": str(tree) if _packaged(tree)
        else os.pathsep.join([str(tree), str(tree / "bench")]),
        "DATABASE_URL": database_url,
        "KAFKA_BOOTSTRAP_SERVERS": servers.bootstrap,
        "GROUP_ID": f"pgcost-{uuid.uuid4().hex[:8]}",
        LATENCY_ENV: "0",
        "METRICS_PORT": "0",
        "KAFKA_IDEMPOTENT_PRODUCER": "false" if servers.embedded_broker else "true",
        "MERGE_BURSTS": "false",
        # 0: one worker process per core, as `turnflow consume` runs by default.
        "CONSUME_WORKERS": str(args.workers),
    })
    if servers.embedded_broker:
        env["KAFKA_FETCH_MAX_WAIT_MS"] = "10"
    if kind == "code":
        env["AGENT"] = ("bench.harness.stand_in_model:bench_agent" if _packaged(tree)
                        else "e2e_bench:bench_agent")
        producer_type: type[InputProducer] = InputProducer
    else:
        env.pop("AGENT", None)
        env.update({"AGENT_REGISTRY": "true",
                    "PLAN_MODEL_TURNS_PER_MINUTE": f"{PLAN}={PER_MINUTE}"})
        producer_type = _NamedProducer
    consumer = _Consumer(env, tree, registry=kind == "registry")
    run = uuid.uuid4().hex[:6]
    warm = producer_type(servers.bootstrap, topics["INBOUND_TOPIC"],
                         [f"warm-{run}-{i}" for i in range(50)])
    producer = producer_type(servers.bootstrap, topics["INBOUND_TOPIC"],
                             [f"{kind}-{run}-{i}" for i in range(args.sessions)])
    replies = ReplyReader(servers.bootstrap, topics["MESSAGES_TOPIC"])
    await warm.start()
    await producer.start()
    await replies.start()
    try:
        await consumer.start()
        await replies.until(await warm.send(200), within=120)
        await _settled(database_url)
        await _server(database_url, "SELECT pg_stat_statements_reset()")
        wal_before = await _server(database_url, "SELECT pg_current_wal_lsn() - '0/0'")
        cpu_before = cluster.cpu_seconds()
        consumer_before = cpu_seconds(consumer.pid)
        started = time.monotonic()
        if args.rate:  # turns one at a time: the inputs paced, not waiting in a backlog
            backlog = await producer.paced(args.rate, args.inputs / args.rate)
        else:
            backlog = await producer.send(args.inputs)
        await replies.until(backlog, within=300)
        await _settled(database_url)
        seconds = time.monotonic() - started
        cpu = cluster.cpu_seconds() - cpu_before
        consumer_cpu = cpu_seconds(consumer.pid) - consumer_before
        wal = int(await _server(database_url, "SELECT pg_current_wal_lsn() - '0/0'")) - int(
            wal_before)
        statements = await _read_statements(database_url)
    finally:
        await consumer.stop()
        await replies.stop()
        await producer.stop()
        await warm.stop()
    if consumer.troubles:
        print(f"  NOTE {kind}: not every turn ran once: {dict(consumer.troubles)}", flush=True)
    return Measured(label or kind, len(backlog), seconds, cpu, wal, consumer_cpu, statements)


async def _settled(url: str) -> None:
    """Until every reply the consumer sent is marked published (the turn's third round trip
    follows its reply's ack)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        left = await _server(url, "SELECT count(*) FROM outbox WHERE published_at IS NULL")
        if not left:
            return
        await asyncio.sleep(0.2)


# -- report ---------------------------------------------------------------------------------------


def report(results: list[Measured]) -> None:
    print()
    print(f"{'kind':>16} {'turns':>6} {'turns/s':>8} {'statements':>10} "
          f"{'stmt ms':>8} {'cluster CPU ms':>14} {'WAL KB':>7} {'consumer CPU ms':>15}"
          "   (per turn)")
    for r in results:
        print(f"{r.kind:>16} {r.turns:>6} {r.turns / r.seconds:>8.0f} "
              f"{r.per_turn_statements:>10.2f} "
              f"{r.per_turn_statement_ms:>8.3f} {r.per_turn_cpu_ms:>14.3f} "
              f"{r.wal_bytes / r.turns / 1024:>7.1f} "
              f"{r.consumer_cpu_s * 1000 / r.turns:>15.3f}")
    for kind in dict.fromkeys(r.kind for r in results):
        runs = [r for r in results if r.kind == kind]
        if not runs:
            continue
        names: dict[str, list[float]] = {}
        for r in runs:
            for name, (calls, _) in r.statements.items():
                names.setdefault(name, []).append(calls / r.turns)
        print(f"{kind}: statements per turn, by kind (mean of {len(runs)} run(s)):")
        for name, values in sorted(names.items(), key=lambda item: -sum(item[1])):
            mean = sum(values) / len(runs)
            if mean >= 0.005:
                print(f"  {mean:6.3f}  {name}")
        if len(runs) > 1:
            cpu = [r.per_turn_cpu_ms for r in runs]
            own = [r.consumer_cpu_s * 1000 / r.turns for r in runs]
            print(f"  cluster CPU per turn: median {statistics.median(cpu):.3f} ms "
                  f"({min(cpu):.3f}-{max(cpu):.3f}); consumer CPU per turn: median "
                  f"{statistics.median(own):.3f} ms ({min(own):.3f}-{max(own):.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inputs", type=int, default=2000)
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--broker", choices=("tansu", "kafka"), default="tansu")
    parser.add_argument("--workers", type=int, default=0,
                        help="consumer processes of the one `turnflow consume` (default 0: "
                             "one per core, its own default)")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="inputs a second, paced (default: all at once, a backlog)")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--against", type=Path, default=None,
                        help="another source tree whose consumer runs each kind too, "
                             "alternating with this one's (its rows marked 'before')")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    for kind in kinds:
        if kind not in KINDS:
            raise SystemExit(f"--kinds: unknown kind {kind!r} ({', '.join(KINDS)})")

    # A stop signal unwinds as an exit does: the cluster and the broker this run started stop.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results: list[Measured] = []
    with ExitStack() as stack:
        cluster = OwnCluster(stack)
        os.environ["DATABASE_URL"] = cluster.url
        database = scratch_database(stack, prefix="turnflow-pgcost")
        asyncio.run(_server(database.url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"))
        asyncio.run(_store_registry_agent(database.url))
        servers = broker_servers(stack, database.url, "own PostgreSQL 15", args.broker)
        paced = f"paced at {args.rate:g}/s" if args.rate else "at once (a backlog)"
        from consumer.turns.supervisor import available_cores

        workers = args.workers or available_cores()
        print(f"servers: {servers.where} (pg_stat_statements); {os.cpu_count()} CPUs; "
              f"{args.inputs} inputs over {args.sessions} conversations a run, {paced}; "
              f"{workers} consumer process(es)", flush=True)
        trees: list[tuple[Path, str]] = [(REPO, "")]
        if args.against is not None:
            trees.insert(0, (args.against.resolve(), " before"))
        for _ in range(args.repeat):
            for kind in kinds:
                for tree, suffix in trees:
                    result = asyncio.run(run_kind(kind, servers, database.url, cluster, args,
                                                  tree=tree, label=kind + suffix))
                    results.append(result)
                    print(f"  done: {result.kind}, {result.turns / result.seconds:.0f} turns/s",
                          flush=True)
    report(results)


if __name__ == "__main__":
    main()
