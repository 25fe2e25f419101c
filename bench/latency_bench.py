"""Latency benchmark: what one ``turnflow consume`` adds to a reply, beyond the model's own time,
at 10% and at 70% of its capacity.

One consumer process (``turnflow consume`` with ``AGENT_REGISTRY``: one registry agent, one model
call a turn) on Apache Kafka and PostgreSQL, its model an OpenAI-compatible stand-in server in a
process of its own (``tests/fixtures/stand_in_model.py``) answering after ``--latency-ms``
(200 by default), keeping connections alive, ``TCP_NODELAY`` set, and logging when each call's
request arrived and when its reply left, with the customer's words, which name the message.
Every message opens a new conversation. A run:

1. capacity: ``--backlog`` new conversations sent at once; turns/s while the middle 80% of
   them were answered (the ramp up and the tail left out);
2. for each share of ``--loads`` (10% and 70%): an open loop of new conversations for
   ``--seconds`` at that share of the capacity, the gaps drawn at random (Poisson arrivals,
   or fixed with ``--arrivals fixed``): a message is sent when it is due, whether or not the
   earlier ones were answered.

Per message, the service-only latency is its reply record's timestamp minus its own record's
timestamp (both stamped by their producers when sent, on this host) minus the time the stand-in
spent on that message's calls (departure minus arrival, by the stand-in's clock: the same host's).
It prints p50/p95/p99 of that per load, with the capacity and the bound ``MAX_IN_FLIGHT /
latency``, the consumer's CPU a turn at capacity and, per load, its CPU busy and its time denied
the CPU by other processes (a shared host's share of the figures). Every input must be answered
once and none twice: the run says which were not, goes on with the others, and exits 1.

Side by side. ``--against SOURCE`` runs a second consumer too, from another checkout (a path: its
``.venv`` python if it has one, else this one's, with that tree first on ``PYTHONPATH``) or the
previous release (``previous``: ``tests/fixtures/previous_release.py``'s virtualenv). With
``--rounds N`` the two alternate, this tree first in odd rounds and the other first in even ones,
each run on fresh topics and a fresh consumer group with the same broker, database and stand-in.

``--against-env NAME=VALUE`` sets a setting on the second consumer only (with ``--against .``,
one setting compared on this tree).

``--breakdown`` runs the consumer through ``bench/turn_times.py``, which notes when each turn
reached each step (fetched, load permit, load, slot, save, publish), when the fetch loop
committed, and the event loop's lag, and prints, per load, how the service-only time splits into
those steps. ``--profile FILE`` runs the consumer under pyinstrument and splits its busy time by
library (the HTTP client apart from the engine that calls it).

    python -m bench.latency_bench [--quick] [--latency-ms 200] [--loads 0.1,0.7]
                                  [--against PATH|previous] [--against-env NAME=VALUE]
                                  [--rounds N] [--capacity N] [--breakdown] [--profile FILE]
    make bench-latency ARGS="..."

Servers: ``DATABASE_URL`` (a scratch database is created there and dropped), else an embedded
PostgreSQL; ``KAFKA_BOOTSTRAP_SERVERS``, else one Apache Kafka node started for the run. Every
phase ends within a bounded time; the stand-in, the consumer and the broker are stopped at the
end, whatever happened.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import REPO
from bench.harness.percentiles import percentile
from bench.harness.ports import free_port
from bench.harness.processes import ConsumerProcess, cpu_seconds
from bench.harness.registry import store_registry_agents
from bench.harness.report import servers_line
from bench.harness.servers import Servers, start_servers
from bench.harness.topics import fresh_topics
from bench.harness.traffic import Replies

AGENT_ID = "agent-ws-0"  # the registry agent of workspace ws-0 (bench.harness.registry)
STEPS = ("fetched", "permit", "permitted", "load", "loaded", "slot", "slotted", "save", "saved",
         "publish", "published")

# -- the pure pieces: the model's time per message, the figures ------------------------------------


INPUT_ID = re.compile(r"lat-[0-9a-f]{6}-[a-z0-9]+-\d+")


def model_ms_per_input(calls: Iterable[tuple[float, float, str]]) -> dict[str, float]:
    """Per input id, the stand-in's own time on its calls in milliseconds: each call's
    departure minus arrival, summed over the calls whose words name the input."""
    spent: dict[str, float] = defaultdict(float)
    for arrived, left, words in calls:
        for input_id in set(INPUT_ID.findall(words)):
            spent[input_id] += (left - arrived) * 1000
    return dict(spent)


def service_only_ms(
    sent_ms: dict[str, int], replied_ms: dict[str, int], model_ms: dict[str, float]
) -> dict[str, float]:
    """Per answered input: reply timestamp minus send timestamp minus the model's own time
    (an input whose calls the stand-in did not log counts none)."""
    return {
        input_id: replied_ms[input_id] - sent - model_ms.get(input_id, 0.0)
        for input_id, sent in sent_ms.items()
        if input_id in replied_ms
    }


def steady_rate(stamps_ms: Iterable[int], trim: float = 0.1) -> float:
    """Replies per second over the middle of a backlog: from the reply at the ``trim``
    quantile to the one at ``1 - trim`` (the ramp up and the tail left out)."""
    ordered = sorted(stamps_ms)
    if len(ordered) < 3:
        return float("nan")
    first = int(trim * (len(ordered) - 1))
    last = round((1 - trim) * (len(ordered) - 1))
    span_s = (ordered[last] - ordered[first]) / 1000
    return (last - first) / span_s if span_s > 0 else float("nan")


def arrival_gaps(rate: float, count: int, kind: str, seed: int) -> Iterator[float]:
    """Seconds between consecutive sends: exponential (``poisson``) or equal (``fixed``)."""
    draw = random.Random(seed)
    for _ in range(count):
        yield draw.expovariate(rate) if kind == "poisson" else 1 / rate


def run_queue_seconds(pid: int) -> float:
    """Seconds the process's threads spent runnable but waiting for a CPU (Linux
    ``/proc/<pid>/task/*/schedstat``, its second field); 0.0 where unavailable. On a shared
    host this is the time other processes took from it: a wait no change to it can remove."""
    total = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0.0
    for task in tasks:
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9


# -- load ----------------------------------------------------------------------------------------


class Sender:
    """Sends new conversations' first messages; remembers each one's send timestamp (its record's
    CreateTime). No linger: a message goes out when it is due, not with the next ones."""

    def __init__(self, bootstrap: str, topic: str, run: str) -> None:
        from aiokafka import AIOKafkaProducer

        self._producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
        self._topic = topic
        self._run = run
        self._count = 0
        self.sent_ms: dict[str, int] = {}

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def send(self, phase: str) -> str:
        """One new conversation's message; its input id (also its session id and in its words,
        so the stand-in's log names it), once the broker acknowledged it."""
        self._count += 1
        input_id = f"lat-{self._run}-{phase}-{self._count}"
        value = {"session_id": input_id, "agent_id": AGENT_ID, "message": f"oi {input_id}",
                 "id": input_id}
        ack = await self._producer.send(self._topic, json.dumps(value).encode(),
                                        key=input_id.encode())
        self.sent_ms[input_id] = (await ack).timestamp
        return input_id

    async def backlog(self, phase: str, count: int) -> list[str]:
        return list(await asyncio.gather(*(self.send(phase) for _ in range(count))))

    async def open_loop(self, phase: str, rate: float, seconds: float, kind: str,
                        seed: int) -> list[str]:
        """Messages at ``rate`` a second for ``seconds``, each sent when due (its own task),
        however many are unanswered."""
        sends: list[asyncio.Task[str]] = []
        started = time.monotonic()
        due = 0.0
        for gap in arrival_gaps(rate, int(rate * seconds * 3) + 10, kind, seed):
            due += gap
            if due > seconds:
                break
            await asyncio.sleep(max(0.0, started + due - time.monotonic()))
            sends.append(asyncio.create_task(self.send(phase)))
        return list(await asyncio.gather(*sends))


async def _answered(
    replies: Replies, ids: list[str], within: float, consumer: ConsumerProcess,
    problems: list[str], what: str,
) -> None:
    """Wait until every one of ``ids`` is answered. Those never answered within ``within`` are
    a failed check: noted in ``problems`` with what the consumer logged of its turns' troubles
    and its last lines, and the run goes on with the answered ones (the other side of a
    comparison still gets measured)."""
    try:
        await replies.until(set(ids), within=within)
    except TimeoutError as exc:
        told = ", ".join(f"{n} {kind}" for kind, n in sorted(consumer.troubles.items()))
        problems.append(f"{what}: {exc}; the consumer's troubles: {told or 'none logged'}")
        print(f"  CHECK FAILED, {problems[-1]}; its last lines: {consumer.tail[-2:]}",
              flush=True)


def _first_reply_ms(replies: Replies, ids: Iterable[str]) -> dict[str, int]:
    return {i: replies.stamps[i][0] for i in ids if replies.stamps.get(i)}


# -- one consumer, one run -------------------------------------------------------------------------


@dataclass
class Source:
    """Where a consumer's code comes from: this tree, another checkout, the previous release."""

    label: str
    python: str
    cwd: Path
    pythonpath: str | None  # first on PYTHONPATH (None: the venv's installed package)
    env: tuple[str, ...] = ()  # NAME=VALUE settings for this side only (``--against-env``)

    @classmethod
    def of(cls, given: str) -> Source:
        if given == "previous":
            from tests.fixtures.previous_release import commit, install

            home = install()
            return cls(f"previous {commit()[:8]}", str(home / "venv" / "bin" / "python"),
                       home / "src", None)
        path = Path(given).resolve()
        venv = path / ".venv" / "bin" / "python"
        return cls(str(path), str(venv) if venv.exists() else sys.executable, path, str(path))


# Run by its path under the consumer's own interpreter: the tree on PYTHONPATH decides what runs.
TURN_TIMES = REPO / "bench" / "turn_times.py"
THIS_TREE = Source("this tree", sys.executable, REPO, str(REPO))


class _Consumer(ConsumerProcess):
    """``turnflow consume`` (``python -m consumer.cli consume``) from a ``Source``, or through
    ``bench/turn_times.py`` when its steps are to be timed."""

    def __init__(self, env: dict[str, str], source: Source, times_to: Path | None,
                 profile_to: Path | None = None) -> None:
        super().__init__(env)
        self._source = source
        self._times_to = times_to
        self._profile = profile_to

    def command(self) -> tuple[list[str], Path]:
        command = [self._source.python, "-m", "consumer.cli", "consume"]
        if self._times_to is not None:
            command = [self._source.python, str(TURN_TIMES), str(self._times_to)]
        if self._profile is not None:  # a pyinstrument session, written at exit
            command[1:1] = ["-m", "pyinstrument", "-r", "session", "-o", str(self._profile)]
        return command, Path(self._source.cwd)


@dataclass
class LoadResult:
    share: float
    rate: float  # offered, messages/s
    ids: list[str]
    service_ms: dict[str, float] = field(default_factory=dict)
    raw_ms: dict[str, float] = field(default_factory=dict)
    model_ms: dict[str, float] = field(default_factory=dict)
    cpu_share: float = float("nan")  # the consumer's CPU seconds a wall second in the load
    # Its threads' time runnable but not running (another process had the CPU), a wall second.
    waited_share: float = float("nan")


@dataclass
class RunResult:
    source: str
    capacity: float
    loads: list[LoadResult]
    troubles: dict[str, int]
    breakdown: dict[str, dict[str, list[float]]] | None = None
    commits: list[float] | None = None
    lag: dict[str, list[float]] | None = None  # per load, the event loop's lag samples (ms)
    capacity_cpu_ms: float = float("nan")  # the consumer's CPU ms a turn over the backlog
    problems: list[str] = field(default_factory=list)  # failed checks: unanswered, twice


async def run_once(servers: Servers, args: argparse.Namespace, source: Source,
                   model_url: str, calls_path: Path, seed: int) -> RunResult:
    topics = await fresh_topics(servers, args.partitions)
    env = dict(os.environ)
    env.pop("TURNFLOW_CRASH_AT", None)
    env.update(topics)
    env.update({
        "DATABASE_URL": servers.database_url,
        "KAFKA_BOOTSTRAP_SERVERS": servers.bootstrap,
        "GROUP_ID": f"bench-{uuid.uuid4().hex[:8]}",
        "AGENT_REGISTRY": "true",
        "OPENAI_BASE_URL": model_url,
        "TURNFLOW_MODEL": "stand-in",
        "MAX_IN_FLIGHT": str(args.max_in_flight),
        "METRICS_PORT": str(free_port()),
        "METRICS_HOST": "127.0.0.1",
        "CONSUME_WORKERS": "1",
        "MERGE_BURSTS": "false",
    })
    if source.pythonpath is not None:
        env["PYTHONPATH"] = source.pythonpath
    else:
        env.pop("PYTHONPATH", None)
    for item in [*args.env, *source.env]:
        name, _, value = item.partition("=")
        env[name] = value
    times_to = None
    if args.breakdown:
        times_to = Path(tempfile.mkdtemp(prefix="turnflow-latency-")) / "times.jsonl"
    run = uuid.uuid4().hex[:6]
    consumer = _Consumer(env, source, times_to, args.profile)
    sender = Sender(servers.bootstrap, topics["INBOUND_TOPIC"], run)
    replies = Replies(servers.bootstrap, topics["MESSAGES_TOPIC"])
    await sender.start()
    await replies.start()
    loads: list[LoadResult] = []
    problems: list[str] = []
    try:
        await consumer.start()
        warm = await sender.backlog("warm", 20)
        await _answered(replies, warm, 60, consumer, problems, "warm-up")
        print(f"  [{source.label}] capacity: a backlog of {args.backlog} new conversations",
              flush=True)
        cpu = cpu_seconds(consumer.pid)
        backlog = await sender.backlog("cap", args.backlog)
        bound_s = 60 + args.backlog * args.latency_ms / 1000 / args.max_in_flight * 10
        await _answered(replies, backlog, bound_s, consumer, problems, "capacity")
        capacity = steady_rate(_first_reply_ms(replies, backlog).values())
        print(f"  [{source.label}] capacity {capacity:.1f} turns/s", flush=True)
        capacity_cpu = (cpu_seconds(consumer.pid) - cpu) / len(backlog) * 1000
        base = args.capacity or capacity
        for n, share in enumerate(args.loads):
            await asyncio.sleep(2)  # the backlog's last marks and commits out of the way
            rate = share * base
            print(f"  [{source.label}] {share:.0%}: {rate:.1f} messages/s for {args.seconds:g} s "
                  f"({args.arrivals})", flush=True)
            cpu, waited, wall = (cpu_seconds(consumer.pid), run_queue_seconds(consumer.pid),
                                 time.monotonic())
            ids = await sender.open_loop(f"p{n}", rate, args.seconds, args.arrivals,
                                         seed * 100 + n)
            elapsed = time.monotonic() - wall
            cpu_share = (cpu_seconds(consumer.pid) - cpu) / elapsed
            waited_share = (run_queue_seconds(consumer.pid) - waited) / elapsed
            await _answered(replies, ids, 60 + args.seconds, consumer, problems,
                            f"{share:.0%}")
            loads.append(LoadResult(share, rate, ids, cpu_share=cpu_share,
                                    waited_share=waited_share))
    finally:
        await consumer.stop()
        await replies.stop()
        await sender.stop()
    model = model_ms_per_input(_read_calls(calls_path))
    for result in loads:
        replied = _first_reply_ms(replies, result.ids)
        sent = {i: sender.sent_ms[i] for i in result.ids}
        result.model_ms = {i: model.get(i, 0.0) for i in result.ids}
        result.service_ms = service_only_ms(sent, replied, model)
        result.raw_ms = {i: float(replied[i] - sent[i]) for i in replied}
    twice = [i for i in sender.sent_ms if len(replies.stamps.get(i, ())) > 1]
    if twice:
        problems.append(f"{len(twice)} inputs answered twice")
    outcome = RunResult(source.label, capacity, loads, dict(consumer.troubles),
                        capacity_cpu_ms=capacity_cpu, problems=problems)
    if times_to is not None:
        outcome.breakdown, outcome.commits, outcome.lag = breakdown(
            _lines(times_to), loads, sender.sent_ms, replies
        )
    return outcome


def _lines(path: Path) -> list[str]:
    """A file's lines; none when it was never written (a consumer that did not exit cleanly)."""
    return path.read_text().splitlines() if path.exists() else []


def _read_calls(path: Path) -> list[tuple[float, float, str]]:
    """The stand-in's log of calls: ``[arrived, left, words]`` a line."""
    return [(float(a), float(b), str(w)) for a, b, w in map(json.loads, _lines(path))]


# -- where a turn waits ----------------------------------------------------------------------------

PARTS = (
    ("fetch", None, "fetched"),  # sent (its record's timestamp) to queued for its conversation
    ("to load permit", "fetched", "permit"),
    ("load permit", "permit", "permitted"),
    ("to load", "permitted", "load"),
    ("load", "load", "loaded"),
    ("route", "loaded", "slot"),
    ("slot", "slot", "slotted"),
    ("turn - model", "slotted", "save"),  # the engine turn and its HTTP calls, model time out
    ("save", "save", "saved"),
    ("to publish", "saved", "publish"),
    ("publish", "publish", None),  # to the reply record's timestamp (stamped at its send)
)


def breakdown(
    lines: list[str], loads: list[LoadResult], sent_ms: dict[str, int], replies: Replies
) -> tuple[dict[str, dict[str, list[float]]], list[float], dict[str, list[float]]]:
    """Per load, per part of a turn, the milliseconds each message spent there; the fetch
    loop's commit durations; per load, the event loop's lag from its first send to its last
    reply."""
    at: dict[str, dict[str, float]] = defaultdict(dict)
    commits: list[float] = []
    lags: list[tuple[float, float]] = []
    open_commit: float | None = None
    for line in lines:
        stamp, step, session = json.loads(line)
        if step == "lag":
            lags.append((stamp, float(session)))
        elif step == "commit":
            open_commit = stamp
        elif step == "committed" and open_commit is not None:
            commits.append((stamp - open_commit) * 1000)
            open_commit = None
        elif step in STEPS:
            at[session].setdefault(step, stamp)  # the first attempt's
    out: dict[str, dict[str, list[float]]] = {}
    lag: dict[str, list[float]] = {}
    for result in loads:
        answered = [i for i in result.ids if replies.stamps.get(i)]
        if answered:
            since = min(sent_ms[i] for i in answered) / 1000
            until = max(replies.stamps[i][0] for i in answered) / 1000
            lag[f"{result.share:.0%}"] = [ms for stamp, ms in lags if since <= stamp <= until]
        parts: dict[str, list[float]] = defaultdict(list)
        for input_id in result.ids:
            steps = at.get(input_id, {})
            if not replies.stamps.get(input_id):
                continue
            edges = dict(steps)
            edges["_sent"] = sent_ms[input_id] / 1000
            edges["_reply"] = replies.stamps[input_id][0] / 1000
            for name, start, end in PARTS:
                a, b = edges.get(start or "_sent"), edges.get(end or "_reply")
                if a is None or b is None:
                    continue
                spent = (b - a) * 1000
                if name == "turn - model":
                    spent -= result.model_ms.get(input_id, 0.0)
                parts[name].append(spent)
        out[f"{result.share:.0%}"] = dict(parts)
    return out, commits, lag


# The library a sample's innermost known frame belongs to: the innermost match wins, so the
# HTTP client's time under the engine's provider call counts as the HTTP client's.
PROFILE_PARTS = (
    ("start-up (imports)", (":_find_and_load",)),
    ("idle (selector)", ("selectors.py",)),
    ("HTTP client", ("/httpx/", "/httpcore/", "/h11/", "/anyio/")),
    ("serialization", ("/json/", "pydantic", "jsoncodec", "orjson")),
    ("database", ("sqlalchemy", "asyncpg", "/store/")),
    ("broker", ("aiokafka", "/kafka/")),
    ("logging", ("/logging/", "consumer/logs.py")),
    ("event loop", ("/asyncio/",)),
    ("engine", ("/engine/",)),
    ("consumer", ("/consumer/",)),
)


def profile_parts(session_file: Path) -> dict[str, float]:
    """Seconds of the consumer's wall time per part (``PROFILE_PARTS``), from a pyinstrument
    session; synthetic frames are skipped (their time is in their parent's self time)."""
    from pyinstrument.session import Session

    totals: dict[str, float] = defaultdict(float)
    root = Session.load(str(session_file)).root_frame()
    stack: list[tuple[Any, list[str]]] = [(root, [])] if root is not None else []
    while stack:
        frame, path = stack.pop()
        here = [*path, f"{frame.file_path or ''}:{frame.function or ''}"]
        if not frame.is_synthetic and frame.total_self_time:
            totals[_profile_part(here)] += frame.total_self_time
        stack.extend((child, here) for child in frame.children)
    return dict(totals)


def _profile_part(path: list[str]) -> str:
    if any(p.endswith(":_find_and_load") for p in path):
        return "start-up (imports)"
    for entry in reversed(path):
        for name, needles in PROFILE_PARTS[1:]:
            if any(n in entry for n in needles):
                return name
    return "other"


def report_profile(session_file: Path) -> None:
    parts = profile_parts(session_file)
    busy = sum(v for k, v in parts.items() if k not in ("idle (selector)", "start-up (imports)"))
    print(f"\nwhere the consumer's time went (pyinstrument, the whole run; busy "
          f"{busy:.1f} s):")
    for name, seconds in sorted(parts.items(), key=lambda kv: -kv[1]):
        share = "" if name in ("idle (selector)", "start-up (imports)") else (
            f"{seconds / busy:>6.1%} of busy" if busy else "")
        print(f"  {name:<20} {seconds:>7.2f} s  {share}")


# -- the report ------------------------------------------------------------------------------------


def _row(values: Iterable[float]) -> str:
    values = list(values)
    return (f"{percentile(values, 0.5):>7.1f} {percentile(values, 0.95):>7.1f} "
            f"{percentile(values, 0.99):>7.1f}")


def report_run(r: RunResult, args: argparse.Namespace) -> None:
    bound = args.max_in_flight / (args.latency_ms / 1000)
    print("(CPU busy: the consumer's CPU time a wall second of the load; CPU denied: its time "
          "runnable while other processes had the CPU)")
    print(f"\n{r.source}: capacity {r.capacity:.1f} turns/s ({r.capacity / bound:.2f} of the "
          f"bound {bound:.0f}), the consumer's CPU {r.capacity_cpu_ms:.2f} ms a turn")
    print(f"{'load':>5} {'rate/s':>7} {'n':>5}  {'service-only ms':>23}  {'raw ms':>23}  "
          f"{'model ms':>8} {'CPU':>5} {'CPU':>6}")
    print(f"{'':>5} {'':>7} {'':>5}  {'p50':>7} {'p95':>7} {'p99':>7}  {'p50':>7} {'p95':>7} "
          f"{'p99':>7}  {'mean':>8} {'busy':>5} {'denied':>6}")
    for load in r.loads:
        model = statistics.fmean(load.model_ms.values()) if load.model_ms else float("nan")
        print(f"{load.share:>5.0%} {load.rate:>7.1f} {len(load.service_ms):>5}  "
              f"{_row(load.service_ms.values())}  {_row(load.raw_ms.values())}  {model:>8.1f} "
              f"{load.cpu_share:>5.0%} {load.waited_share:>6.0%}")
    if r.troubles:
        told = ", ".join(f"{n} {what}" for what, n in sorted(r.troubles.items()))
        print(f"NOTE: not every turn ran once: {told}")
    print("checks: " + ("every input answered, none twice" if not r.problems
                        else "FAILED: " + "; ".join(r.problems)))
    if r.breakdown:
        print("\nwhere the service-only time goes, ms a message (mean / p50 / p99):")
        shares = list(r.breakdown)
        print(f"{'part':<15}" + "".join(f" {s + ' mean':>10} {'p50':>7} {'p99':>7}"
                                        for s in shares))
        for name, _, _ in PARTS:
            cells = ""
            for share in shares:
                values = r.breakdown[share].get(name, [])
                mean = statistics.fmean(values) if values else float("nan")
                cells += (f" {mean:>10.1f} {percentile(values, 0.5):>7.1f} "
                          f"{percentile(values, 0.99):>7.1f}")
            print(f"{name:<15}{cells}")
        for share, samples in (r.lag or {}).items():
            if samples:
                print(f"event loop lag at {share}: p50 {percentile(samples, 0.5):.1f} ms, p95 "
                      f"{percentile(samples, 0.95):.1f} ms, p99 {percentile(samples, 0.99):.1f} "
                      f"ms ({len(samples)} samples, a 10 ms sleep every 10 ms)")
        if r.commits:
            print(f"fetch loop commits: {len(r.commits)}, p50 {percentile(r.commits, 0.5):.1f} ms,"
                  f" p99 {percentile(r.commits, 0.99):.1f} ms, max {max(r.commits):.1f} ms")


def report_sides(results: list[RunResult]) -> None:
    """Each source's runs side by side: capacity and service-only p50/p95/p99 per load."""
    by_source: dict[str, list[RunResult]] = defaultdict(list)
    for r in results:
        by_source[r.source].append(r)
    if len(by_source) < 2 and len(results) < 2:
        return
    print("\nside by side (every run, in the order run):")
    for label, runs in by_source.items():
        print(f"  {label}:")
        for r in runs:
            cells = "; ".join(
                f"{load.share:.0%} p50/p95/p99 {percentile(load.service_ms.values(), 0.5):.0f}/"
                f"{percentile(load.service_ms.values(), 0.95):.0f}/"
                f"{percentile(load.service_ms.values(), 0.99):.0f} ms"
                for load in r.loads
            )
            print(f"    capacity {r.capacity:.0f}/s; {cells}")


# -- main ------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--latency-ms", type=int, default=200,
                        help="the stand-in model's delay per call")
    parser.add_argument("--loads", default="0.1,0.7",
                        help="offered loads, as shares of the measured capacity")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each load")
    parser.add_argument("--backlog", type=int, default=4000,
                        help="new conversations sent at once to measure the capacity")
    parser.add_argument("--capacity", type=float, default=None,
                        help="take this as the capacity (turns/s) for the loads, not the "
                        "measured one (the same offered rates for both sides)")
    parser.add_argument("--arrivals", choices=("poisson", "fixed"), default="poisson")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--max-in-flight", type=int, default=64)
    parser.add_argument("--against", default=None, metavar="PATH|previous",
                        help="also run a consumer from another checkout, or the previous release")
    parser.add_argument("--against-env", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for the --against consumer only (--against . with "
                        "one to compare a setting on this tree)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --against: alternating rounds of both")
    parser.add_argument("--breakdown", action="store_true",
                        help="time each step of every turn (bench/turn_times.py)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for the consumer process(es)")
    parser.add_argument("--profile", type=Path, default=None, metavar="FILE",
                        help="run the consumer under pyinstrument (its session to FILE) and "
                        "say where its busy time went")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true",
                        help="a short run: a backlog of 1,500 and 10 s per load")


async def _main(servers: Servers, args: argparse.Namespace, sources: list[Source]) -> int:
    from tests.fixtures.stand_in_model import StandInModel

    await store_registry_agents(servers.database_url, 1, {})
    calls_path = Path(tempfile.mkdtemp(prefix="turnflow-latency-")) / "calls.jsonl"
    model = StandInModel(free_port(), delay=args.latency_ms / 1000, keep_alive=True,
                         calls=str(calls_path))
    model.start()
    results: list[RunResult] = []
    try:
        for round_no in range(args.rounds):
            order = sources if round_no % 2 == 0 else sources[::-1]
            for source in order:
                print(f"round {round_no + 1}: {source.label}", flush=True)
                result = await run_once(servers, args, source, model.base_url, calls_path,
                                        args.seed + round_no)
                results.append(result)
                report_run(result, args)
                if args.profile is not None and args.profile.exists():
                    report_profile(args.profile)
    finally:
        model.kill()
    print("\n" + servers_line(servers) + f"model {args.latency_ms} ms a "
          f"call (stand-in over HTTP, keep-alive, TCP_NODELAY); MAX_IN_FLIGHT="
          f"{args.max_in_flight}; {args.partitions} partitions; {args.arrivals} arrivals, "
          f"{args.seconds:g} s a load; backlog {args.backlog}"
          + (f"; env {' '.join(args.env)}" if args.env else ""))
    report_sides(results)
    return 1 if any(r.problems for r in results) else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.backlog, args.seconds = 1500, 10.0
    args.loads = [float(x) for x in args.loads.split(",") if x.strip()]
    sources = [THIS_TREE]
    if args.against:
        other = Source.of(args.against)
        if args.against_env:
            other.env = tuple(args.against_env)
            other.label = f"{other.label} with {' '.join(args.against_env)}"
        sources.append(other)
    elif args.rounds > 1:
        parser.error("--rounds needs --against")
    with ExitStack() as stack:
        servers = start_servers(stack, prefix="turnflow-latency", broker="kafka")
        return asyncio.run(_main(servers, args, sources))


if __name__ == "__main__":
    sys.exit(main())
