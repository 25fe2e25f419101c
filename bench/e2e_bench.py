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
(``store_bench._saves_per_second``, same database, as many clients as the consumer's pool),
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

    python bench/e2e_bench.py [--quick] [--latencies 0,200,1000] [--partitions 1,8]
    turnflow bench [same options]

Servers: ``DATABASE_URL`` (a scratch database is created there and dropped), else an embedded
PostgreSQL; ``KAFKA_BOOTSTRAP_SERVERS``, else the embedded broker. Load goes to those servers
only, and every phase ends after a bounded time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
if str(BENCH_DIR) not in sys.path:  # store_bench, and this module as the consumer's agent
    sys.path.insert(0, str(BENCH_DIR))

LATENCY_ENV = "BENCH_MODEL_LATENCY_MS"
PACED_LOAD = 0.7  # offered rate of the paced phase, as a share of the backlog rate
SAVE_WINDOW_S = 4.0  # each measurement of the save transaction beside a 0 ms run


# -- the agent the consumer process runs --------------------------------------------------------


class LatencyProvider:
    """The offline rule provider behind a fixed delay per call: a model with a known latency."""

    def __init__(self, latency_s: float) -> None:
        from engine import ProviderHooks
        from engine.providers.rules import RuleProvider

        self._inner = RuleProvider()
        self.hooks = ProviderHooks()  # the consumer counts and times calls as with any provider
        self._latency_s = latency_s
        self.calls = 0

    async def generate(self, request: Any) -> Any:
        from engine.providers.http import observed

        async def call() -> Any:
            if self._latency_s:
                await asyncio.sleep(self._latency_s)
            return await self._inner.generate(request)

        self.calls += 1
        return await observed(
            self.hooks, provider="bench", schema_name=request.schema_name, call=call
        )


def bench_agent(latency_ms: float | None = None) -> Any:
    """A message turn with one model call: count (code), a model-phrased reply, a one-hour
    wait (a timer on ``outbound.schedule``) — the save writes a reply and a timer, the shape
    the store benchmark saves. Latency from ``BENCH_MODEL_LATENCY_MS`` unless given."""
    from engine import Agent, ok

    if latency_ms is None:
        latency_ms = float(os.environ.get(LATENCY_ENV, "0"))

    async def count(ctx: Any) -> Any:
        return ok(data={"n": int(ctx.data.get("n") or 0) + 1})

    return Agent(
        name="Bancada",
        provider=LatencyProvider(latency_ms / 1000),
        fields={"n": {"type": "integer"}},
        actions={"count": count},
        flows=[{
            "id": "talk",
            "on": [{"message": []}],
            "steps": [
                {"id": "c", "do": "count"},
                {"id": "reply", "prompt": "Responda em uma frase."},
                {"id": "w", "wait": {"ms": 3_600_000}, "then": "end", "else": "c"},
            ],
        }],
    )


async def calls_per_turn() -> float:
    """Model calls one bench turn spends, measured on the agent itself."""
    agent = bench_agent(0)
    provider = agent.config.provider
    session: Any = None
    turns = 3
    for i in range(turns):
        request: dict[str, Any] = {"session_id": "probe", "message": f"oi {i}", "id": f"p{i}"}
        if session is not None:
            request["session"] = session
        result = await agent.turn(request)
        session = result.session
    return float(provider.calls) / turns


# -- servers ----------------------------------------------------------------------------------


@dataclass
class Servers:
    database_url: str  # the scratch database
    bootstrap: str
    where: str
    embedded_broker: bool


def _servers(stack: ExitStack) -> Servers:
    from consumer.devchat.embedded_broker import EmbeddedBroker
    from store.scratch import scratch_database

    database = scratch_database(stack, prefix="turnflow-e2e")
    url, where = database.url, database.where

    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    embedded = not bootstrap
    if embedded:
        broker = EmbeddedBroker().start()
        stack.callback(broker.stop)
        bootstrap = broker.bootstrap_servers
        where += " + embedded broker"
    else:
        where += " + KAFKA_BOOTSTRAP_SERVERS"
    return Servers(url, bootstrap, where, embedded)


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


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its live children (Linux ``/proc``: the workers of
    ``consume --workers N``), 0.0 where unavailable."""
    pids = [pid]
    for entry in Path("/proc").iterdir():
        fields = _stat(int(entry.name)) if entry.name.isdigit() else None
        if fields is not None and int(fields[1]) == pid:
            pids.append(int(entry.name))
    ticks = 0
    for one in pids:
        fields = _stat(one)
        if fields is not None:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


_LOCAL_HOSTS = {"", "localhost", "127.0.0.1", "::1"}


def _database_cpu_seconds(url: str) -> float | None:
    """User + system CPU of every PostgreSQL process on this host (Linux ``/proc``), with the
    children's times each one has reaped (the postmaster's: backends that exited); None when
    the database is on another host or no such process can be read. Any other PostgreSQL
    running here is counted too."""
    from sqlalchemy.engine import make_url

    host = make_url(url).host or ""
    if host not in _LOCAL_HOSTS and not host.startswith("/"):
        return None
    ticks, found = 0, False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "postgres":
                continue
        except OSError:
            continue
        fields = _stat(int(entry.name))
        if fields is not None:
            found = True
            ticks += sum(int(fields[i]) for i in (11, 12, 13, 14))
    return ticks / os.sysconf("SC_CLK_TCK") if found else None


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


def _percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


class ReplyReader:
    """Reads ``outbound.messages`` and keeps, per input id, the first reply's timestamp."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from aiokafka import AIOKafkaConsumer

        self._consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
            enable_auto_commit=False, max_partition_fetch_bytes=4 << 20,
        )
        self.first_reply_ms: dict[str, int] = {}
        self.bytes_read = 0  # keys and values of every reply record read
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._consumer.start()
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while True:
            batches = await self._consumer.getmany(timeout_ms=200, max_records=5000)
            for records in batches.values():
                for record in records:
                    self.bytes_read += len(record.key or b"") + len(record.value or b"")
                    input_id = json.loads(record.value).get("input_id")
                    if input_id is not None:
                        self.first_reply_ms.setdefault(input_id, record.timestamp)

    async def until(self, ids: set[str], within: float) -> None:
        deadline = time.monotonic() + within
        while not ids <= self.first_reply_ms.keys():
            if time.monotonic() > deadline:
                missing = len(ids - self.first_reply_ms.keys())
                raise TimeoutError(f"{missing} of {len(ids)} inputs unanswered after {within}s")
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._consumer.stop()


class InputProducer:
    """Produces bench inputs round-robin over the sessions; remembers each send timestamp."""

    def __init__(self, bootstrap: str, topic: str, sessions: list[str]) -> None:
        from aiokafka import AIOKafkaProducer

        self._producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        self._topic = topic
        self._sessions = sessions
        self._next = 0
        self.sent_ms: dict[str, int] = {}
        self.bytes_sent = 0  # keys and values of every input record sent

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    def _records(self, count: int) -> Iterator[tuple[str, bytes, bytes]]:
        for _ in range(count):
            session = self._sessions[self._next % len(self._sessions)]
            self._next += 1
            input_id = f"in.{self._next}.{uuid.uuid4().hex[:6]}"
            value = {"session_id": session, "message": f"mensagem {self._next}", "id": input_id}
            yield input_id, session.encode(), json.dumps(value).encode()

    async def send(self, count: int) -> set[str]:
        """Send ``count`` inputs, await every ack; their ids."""
        pending = []
        for input_id, key, value in self._records(count):
            self.bytes_sent += len(key) + len(value)
            pending.append((input_id, await self._producer.send(self._topic, value, key=key)))
        for input_id, ack in pending:
            self.sent_ms[input_id] = (await ack).timestamp
        return {input_id for input_id, _ in pending}

    async def paced(self, rate: float, seconds: float) -> set[str]:
        """Send at ``rate`` inputs/s for ``seconds`` (ticks of 20 ms); their ids."""
        ids: set[str] = set()
        started = time.monotonic()
        sent = 0
        while (elapsed := time.monotonic() - started) < seconds:
            due = int(rate * elapsed) + 1
            if due > sent:
                ids |= await self.send(due - sent)
                sent = due
            await asyncio.sleep(0.02)
        return ids


class ConsumerProcess:
    """``python -m consumer.cli consume`` (optionally under pyinstrument) for one run."""

    # A run whose turns failed and ran again still ends with every reply once and in order, so
    # the figures would look valid while measuring retries: these log lines are counted and
    # shown with the run.
    TROUBLES = {
        "input failed; retrying": "retried",
        "version conflict; rerunning": "rerun after a version conflict",
        "replay skipped": "replays skipped",
        "sent to the DLQ": "dead-lettered",
        "session worker crashed": "worker crashes",
    }

    def __init__(self, env: dict[str, str], profile_to: Path | None = None) -> None:
        self._env = env
        self._profile_to = profile_to
        self._process: asyncio.subprocess.Process | None = None
        self._log_task: asyncio.Task[None] | None = None
        self.assigned = asyncio.Event()
        self.tail: list[str] = []
        self.troubles: Counter[str] = Counter()

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    async def start(self, within: float = 60.0) -> None:
        prefix: list[str] = [sys.executable]
        if self._profile_to is not None:
            prefix += ["-m", "pyinstrument", "-r", "session", "-o", str(self._profile_to)]
        self._process = await asyncio.create_subprocess_exec(
            *prefix, "-m", "consumer.cli", "consume",
            env=self._env, cwd=str(REPO), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )
        self._log_task = asyncio.create_task(self._read_logs())
        try:
            await asyncio.wait_for(self.assigned.wait(), timeout=within)
        except TimeoutError:
            raise RuntimeError(f"consumer not ready: {self.tail[-5:]}") from None

    async def _read_logs(self) -> None:
        assert self._process is not None and self._process.stderr is not None
        while line := await self._process.stderr.readline():
            text = line.decode(errors="replace")
            if '"partitions assigned"' in text:
                self.assigned.set()
            for needle, name in self.TROUBLES.items():
                if needle in text:
                    self.troubles[name] += 1
            self.tail = [*self.tail[-20:], text.rstrip()]

    async def stop(self) -> None:
        if self._process is None:
            return
        if self._process.returncode is None:
            self._process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self._process.wait(), timeout=60)
        except TimeoutError:
            self._process.kill()
            await self._process.wait()
        if self._log_task is not None:
            await asyncio.gather(self._log_task, return_exceptions=True)


async def _topics(servers: Servers, partitions: int) -> dict[str, str]:
    from consumer.topics import TopicSpec, ensure_topics

    suffix = uuid.uuid4().hex[:8]
    names = {
        "INBOUND_TOPIC": f"bench.inbound.{suffix}",
        "MESSAGES_TOPIC": f"bench.messages.{suffix}",
        "SCHEDULE_TOPIC": f"bench.schedule.{suffix}",
        "DLQ_TOPIC": f"bench.dlq.{suffix}",
    }
    await ensure_topics(servers.bootstrap, [
        TopicSpec(name, partitions if variable != "DLQ_TOPIC" else 1)
        for variable, name in names.items()
    ])
    return names


_SEED_SESSIONS = """
INSERT INTO sessions (id, version, state)
SELECT s.id, $2, jsonb_set(CAST($3 AS jsonb), '{id}', to_jsonb(s.id))
FROM unnest(CAST($1 AS text[])) AS s(id)
"""

# Each earlier turn: a customer message and one reply, as the consumer logs a turn of the bench
# agent (no source record: these turns were never on the topic), with the history entries its
# save would have stored.
_SEED_TURNS = """
INSERT INTO turns (session_id, version, input, messages, llm_calls, input_id, created_at, history)
SELECT t.*, {entries} FROM (
    SELECT s.id, g,
           jsonb_build_object('session_id', s.id, 'message', 'mensagem anterior ' || g,
                              'id', 'h' || g),
           jsonb_build_array(jsonb_build_object(
               'kind', 'ai', 'text', 'Resposta anterior número ' || g || ', em uma frase.')),
           1, 'h' || g, now() - (($2 - g) || ' minutes')::interval
    FROM unnest(CAST($1 AS text[])) AS s(id), generate_series(1, $2) AS g
) AS t(session_id, version, input, messages, llm_calls, input_id, created_at)
"""


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


async def _checkpoint(connection: Any) -> None:
    """Write the seeded rows out now. Seeding 1,000 sessions 100 turns in writes a few hundred
    MB of WAL; left alone, the checkpoint that volume triggers ran 45 s into the measured runs,
    and two of them went at a seventh of their rate with the server's CPU per turn five times
    its usual. ``CHECKPOINT`` needs a superuser or ``pg_checkpoint``: without either the run
    goes on, and says so."""
    import asyncpg

    try:
        await connection.execute("CHECKPOINT")
    except asyncpg.InsufficientPrivilegeError:
        print("  (no CHECKPOINT after seeding: the role may not; a checkpoint the seeded WAL "
              "triggers may fall in a measured run)", flush=True)


async def seed_history(url: str, session_ids: list[str], turns: int) -> None:
    """Give every session ``turns`` earlier turns: its state after them and their turn log, so
    each load reads the history a conversation that far along has (2 entries a turn, up to the
    consumer's ``HISTORY_LIMIT``)."""
    import asyncpg

    from consumer.settings import Settings
    from store import Store
    from store.history import turn_entries
    from store.jsoncodec import dumps
    from store.urls import plain_url

    # The consumer's default, which the benchmark's consumer runs with.
    history_limit = Settings.model_fields["history_limit"].default

    agent = bench_agent(0)
    state: Any = None
    for n in range(1, turns + 1):
        request: dict[str, Any] = {"session_id": "seed", "message": f"mensagem anterior {n}",
                                   "id": f"h{n}"}
        if state is not None:
            request["session"] = state
        state = (await agent.turn(request)).session.model_dump(mode="json")
    connection = await asyncpg.connect(plain_url(url))
    try:
        await connection.execute(_SEED_SESSIONS, session_ids, turns, dumps(state))
        entries = turn_entries("t.input", "t.messages", "t.created_at")
        await connection.execute(
            _SEED_TURNS.replace("{entries}", entries), session_ids, turns
        )
        # Vacuumed as well as analysed: autovacuum would otherwise take up the seeded rows
        # while the run is measured, and bill its CPU to the turns.
        for table in ("sessions", "turns"):
            await connection.execute(f"VACUUM ANALYZE {table}")
        await _checkpoint(connection)
    finally:
        await connection.close()
    store = await Store.connect(url, pool_size=1, max_overflow=0)
    try:  # what the consumer will read back: the version and the whole history window
        loaded = await store.load(session_ids[-1], history_limit=history_limit)
    finally:
        await store.close()
    assert loaded.version == turns, loaded.version
    assert len(loaded.history) == min(history_limit, 2 * turns), len(loaded.history)
    assert loaded.state is not None and loaded.state["id"] == session_ids[-1], loaded.state


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
    topics = await _topics(servers, partitions)
    from consumer.processes import free_port

    metrics_port = free_port() if workers == 1 else None
    env = dict(os.environ)
    env.pop("TURNFLOW_CRASH_AT", None)
    env.update(topics)
    env.update({
        "PYTHONPATH": os.pathsep.join([str(REPO), str(BENCH_DIR)]),
        "DATABASE_URL": servers.database_url,
        "KAFKA_BOOTSTRAP_SERVERS": servers.bootstrap,
        "GROUP_ID": f"bench-{uuid.uuid4().hex[:8]}",
        "AGENT": "e2e_bench:bench_agent",
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
        cpu_before = _cpu_seconds(consumer.pid)
        gc_before = await _gc_seconds(metrics_port)
        db_before = _database_cpu_seconds(servers.database_url)
        disk_before = await _wal_and_size(servers.database_url)
        # Generous bound: the model alone needs inputs x calls x latency / max_in_flight.
        within = 60 + inputs * 2 * latency_ms / 1000 / max_in_flight * 3
        await replies.until(backlog, within=within)
        replied_bytes, input_bytes = replies.bytes_read, producer.bytes_sent
        cpu = _cpu_seconds(consumer.pid) - cpu_before
        gc_after = await _gc_seconds(metrics_port)
        gc = None if gc_before is None or gc_after is None else gc_after - gc_before
        db_after = _database_cpu_seconds(servers.database_url)
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
        paced_inputs=len(paced), p50_ms=_percentile(latencies, 0.50),
        p95_ms=_percentile(latencies, 0.95), p99_ms=_percentile(latencies, 0.99),
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
# LatencyProvider.generate and its inner call: this benchmark's own wrapper in the model's place.
_STAND_IN = tuple(f"{REPO / 'bench' / 'e2e_bench.py'}:{name}" for name in ("generate", "call"))


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
    import store_bench

    saves, _, cpu_ms = asyncio.run(store_bench._saves_per_second(url, clients, seconds))
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


def _spread(values: list[float]) -> str:
    ordered = sorted(values)
    if len(ordered) == 1:
        return f"{ordered[0]:.2f}"
    return f"{statistics.median(ordered):.2f} (median of {len(ordered)}: " \
        f"{ordered[0]:.2f}-{ordered[-1]:.2f})"


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
        lines.append(f"  0 ms, {label}: CPU per turn {_spread(cpu)} x the save's client CPU, "
                     f"{verdict(statistics.median(cpu), cpu_wanted, True)}")
        lines.append(f"  0 ms, {label}: turns/s {_spread(rate)} x the save rate, "
                     f"{verdict(statistics.median(rate), 0.6, False)}")
    for latency in sorted({r.latency_ms for r in results if r.latency_ms}):
        bound = _bound(args.max_in_flight, per_turn, latency)
        shares = [r.turns_per_s / bound for r in results
                  if r.latency_ms == latency and r.workers == 1]
        if latency == 200 and shares:
            lines.append(f"  200 ms: turns/s {_spread(shares)} of the bound ({bound:.0f}), "
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


def _broker_servers(stack: ExitStack, database_url: str, where: str, broker: str) -> Servers:
    """``tansu``: the embedded broker; ``kafka``: one Apache Kafka node (KRaft) on this host,
    its JVM sized for throughput rather than for the tests."""
    if broker == "tansu":
        from consumer.devchat.embedded_broker import EmbeddedBroker

        tansu = EmbeddedBroker().start()
        stack.callback(tansu.stop)
        return Servers(database_url, tansu.bootstrap_servers, f"{where} + Tansu (embedded)", True)
    if broker == "kafka":
        if str(REPO) not in sys.path:  # the fixture lives in the source tree's tests/
            sys.path.insert(0, str(REPO))
        from tests.fixtures.kafka_server import KAFKA_VERSION, KafkaServer

        kafka = KafkaServer(jvm_options=("-Xms1g", "-Xmx1g", "-XX:+UseG1GC",
                                         "-Djava.awt.headless=true")).start()
        stack.callback(kafka.stop)
        return Servers(database_url, kafka.bootstrap_servers,
                       f"{where} + Apache Kafka {KAFKA_VERSION}", False)
    raise SystemExit(f"--brokers: unknown broker {broker!r} (tansu, kafka)")


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
    from store.scratch import scratch_database

    latencies = [int(x) for x in args.latencies.split(",")]
    partition_counts = [int(x) for x in args.partitions.split(",")]
    per_turn = asyncio.run(calls_per_turn())
    rows: list[tuple[str, RunResult]] = []
    with ExitStack() as stack:
        database = scratch_database(stack, prefix="turnflow-e2e")
        for broker in brokers:
            with ExitStack() as on_broker:
                servers = _broker_servers(on_broker, database.url, database.where, broker)
                print(f"servers: {servers.where}; {os.cpu_count()} CPUs; MAX_IN_FLIGHT="
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
        servers = _servers(stack)
        print(f"servers: {servers.where}; {os.cpu_count()} CPUs; MAX_IN_FLIGHT="
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
