"""Fairness benchmark: one workspace's flood against the other workspaces' trickle, on one
``turnflow consume``.

A hosted deployment serves many workspaces from one inbound topic. Here one consumer process
(``turnflow consume`` with ``AGENT_REGISTRY``) serves one registry agent per workspace, each
behind the benchmark's stand-in model: the offline rule provider after a fixed delay per call
(``--latency-ms``, 200 by default; one model call a turn). Workspace ``ws-0`` floods: ``--flood``
messages over ``--flood-conversations`` conversations, produced as fast as the producer goes.
The other workspaces (``--workspaces`` in all) trickle: each of their ``--trickle-conversations``
conversations sends a message every ``--trickle-every-ms``. Three phases on the same consumer,
each with fresh conversations:

1. trickle alone: the trickle's reply latency (reply record's timestamp minus its input's);
2. flood alone: its throughput (inputs over the time from the first input sent to the last
   reply);
3. flood and trickle together: the trickle's latency while the flood is being answered, and
   the flood's throughput.

Beside the trickle, new customers of the flooding workspace itself (a fresh conversation of
``ws-0`` with one message every ``--newcomer-every-ms``) write alone in phase 1 and, in phase 3,
once every conversation of the flood had a turn: their latency against alone says whether a
customer with nothing served yet waits for a turn of every conversation of the flood.

The figures are ratios of the same run: trickle p50/p99 during the flood against alone, and
the flood's throughput together against alone. Targets: p99 during <= 2 x p99 alone + 1 s
(the trickle's, and the new customers' of the flooding workspace);
throughput >= 0.9 x alone. Checks on every phase (the fault ledger's): every input answered
(nothing lost), no input answered twice, and each conversation's replies in the order its
inputs were sent (nothing reordered). The look-ahead's cost is the consumer's own figures
(``turnflow_lookahead_records``/``_bytes`` at their peak, sampled) and its resident memory
before and at its peak.

    python -m bench.fairness_bench [--broker kafka|tansu] [--latency-ms 200] [--workspaces 2]
                                   [--flood 6000] [--flood-conversations 600] [--quick]
    make bench-fairness ARGS="..."

Servers: ``DATABASE_URL`` (a scratch database is created there and dropped), else an embedded
PostgreSQL; ``KAFKA_BOOTSTRAP_SERVERS``, else the broker ``--broker`` names, started for the
run (Apache Kafka by default, ``tansu`` the embedded broker). Every phase ends within a bounded
time. ``--env NAME=VALUE`` passes consumer settings (``MAX_BUFFERED_RECORDS=1000`` to see the
look-ahead's effect, for one).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import REPO
from bench.harness.percentiles import percentile
from bench.harness.ports import free_port
from bench.harness.processes import ConsumerProcess
from bench.harness.registry import store_registry_agents
from bench.harness.report import servers_line
from bench.harness.servers import Servers, start_servers
from bench.harness.stand_in_model import LATENCY_ENV, LatencyProvider
from bench.harness.topics import fresh_topics
from bench.harness.traffic import Replies

STAND_IN_FLAG = "--consume-with-stand-in-model"
POOL_ENV = "BENCH_MODEL_POOL"
"""``--model-pool httpx-default``: the provider's client on one pool with httpx's default limits
(100 connections, 20 of them kept alive) instead of its own ``ShardedTransport``."""


def consume_with_stand_in() -> int:
    """``turnflow consume`` with the registry's model replaced by the stand-in (the latency in
    ``BENCH_MODEL_LATENCY_MS``): the benchmark's consumer process."""
    import engine.providers

    if os.environ.get("OPENAI_BASE_URL"):  # --model http: the real provider, over HTTP
        from consumer.cli import main as consume

        if os.environ.get(POOL_ENV) == "httpx-default":  # --model-pool: for comparison
            import httpx

            import engine.providers.http

            engine.providers.http.ShardedTransport = (  # type: ignore[assignment,misc]
                lambda _connections: httpx.AsyncHTTPTransport()
            )

        return consume(["consume"])
    latency_s = float(os.environ.get(LATENCY_ENV, "0")) / 1000
    provider = LatencyProvider(latency_s)
    engine.providers.provider_from_env = lambda *a, **k: provider  # type: ignore[assignment]
    from consumer.cli import main

    return main(["consume"])


# -- load -------------------------------------------------------------------------------------


class Producer:
    """Sends messages to the inbound topic; remembers each input's send timestamp and each
    conversation's inputs in the order sent."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from aiokafka import AIOKafkaProducer

        self._producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        self._topic = topic
        self._count = 0
        self.sent_ms: dict[str, int] = {}
        self.sent_order: dict[str, list[str]] = defaultdict(list)

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def send(self, messages: list[tuple[str, str]], kind: str = "message") -> list[str]:
        """Send ``(session, agent_id)`` inputs in order (customers' messages, or the host's
        ``start`` of the agent's flow), await their acks; their ids."""
        pending = []
        for session, agent_id in messages:
            self._count += 1
            input_id = f"in.{self._count}.{uuid.uuid4().hex[:6]}"
            value: dict[str, Any] = {"session_id": session, "agent_id": agent_id}
            if kind == "start":
                value["start"] = {"flow": "talk", "key": input_id}
                input_id = f"start:{input_id}"  # the id its reply names
            else:
                value.update(message=f"mensagem {self._count}", id=input_id)
            self.sent_order[session].append(input_id)
            future = await self._producer.send(
                self._topic, json.dumps(value).encode(), key=session.encode()
            )
            pending.append((input_id, future))
        for input_id, ack in pending:
            self.sent_ms[input_id] = (await ack).timestamp
        return [input_id for input_id, _ in pending]


def _flood(run: str, conversations: int, messages: int) -> list[tuple[str, str]]:
    """The flood's messages, round robin over its conversations (a broadcast: one each)."""
    return [(f"flood-{run}-{i % conversations}", "agent-ws-0") for i in range(messages)]


async def _send_flood(producer: Producer, run: str, args: argparse.Namespace) -> list[str]:
    """The flood, or with ``--broadcast`` the host's ``start`` to that many customers."""
    if args.broadcast:
        return await producer.send(_flood(run, args.broadcast, args.broadcast), kind="start")
    return await producer.send(_flood(run, args.flood_conversations, args.flood))


async def _trickle(
    producer: Producer, run: str, workspaces: int, conversations: int, every_s: float,
    stop: asyncio.Event, sent: list[str],
) -> None:
    """Each trickle conversation sends one message every ``every_s``, the conversations spread
    evenly over that period, until ``stop``."""
    talkers = [(f"trickle-{run}-w{w}-{c}", f"agent-ws-{w}")
               for w in range(1, workspaces) for c in range(conversations)]
    gap = every_s / len(talkers)
    while not stop.is_set():
        for talker in talkers:
            sent.extend(await producer.send([talker]))
            try:
                await asyncio.wait_for(stop.wait(), timeout=gap)
            except TimeoutError:
                continue
            return


async def _newcomers(
    producer: Producer, run: str, every_s: float, begin: asyncio.Event, stop: asyncio.Event,
    sent: list[str],
) -> None:
    """New customers of the flooding workspace: from ``begin`` until ``stop``, a fresh
    conversation of ``ws-0`` sends one message every ``every_s`` (a customer with nothing
    served yet, in the workspace that floods)."""
    stopped = asyncio.ensure_future(stop.wait())
    began = asyncio.ensure_future(begin.wait())
    await asyncio.wait({stopped, began}, return_when=asyncio.FIRST_COMPLETED)
    began.cancel()
    n = 0
    while not stop.is_set():
        sent.extend(await producer.send([(f"new-{run}-{n}", "agent-ws-0")]))
        n += 1
        try:
            await asyncio.wait_for(asyncio.shield(stopped), timeout=every_s)
        except TimeoutError:
            continue
    stopped.cancel()


# -- checks and figures -----------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    trickle: list[str] = field(default_factory=list)
    flood: list[str] = field(default_factory=list)
    newcomers: list[str] = field(default_factory=list)
    flood_s: float | None = None

    def latencies(self, producer: Producer, replies: Replies) -> list[float]:
        return [replies.stamps[i][0] - producer.sent_ms[i] for i in self.trickle]

    def newcomer_latencies(self, producer: Producer, replies: Replies) -> list[float]:
        return [replies.stamps[i][0] - producer.sent_ms[i] for i in self.newcomers]

    def flood_rate(self) -> float | None:
        if not self.flood or self.flood_s is None:
            return None
        return len(self.flood) / self.flood_s


def _check(phase: Phase, producer: Producer, replies: Replies) -> list[str]:
    """The ledger's checks for a phase's inputs: answered, once, in order per conversation."""
    problems: list[str] = []
    ids = set(phase.trickle) | set(phase.flood) | set(phase.newcomers)
    lost = [i for i in ids if not replies.answered(i)]
    twice = [i for i in ids if len(replies.stamps.get(i, ())) > 1]
    sessions = {s for s, sent in producer.sent_order.items() if ids & set(sent)}
    reordered = [s for s in sessions if replies.order[s] != producer.sent_order[s]]
    if lost:
        problems.append(f"{phase.name}: {len(lost)} inputs lost")
    if twice:
        problems.append(f"{phase.name}: {len(twice)} inputs answered twice")
    if reordered:
        problems.append(f"{phase.name}: {len(reordered)} conversations reordered")
    return problems


class Sampler:
    """Samples the consumer's look-ahead gauges and resident memory every 200 ms."""

    def __init__(self, pid: int, port: int) -> None:
        self._pid = pid
        self._port = port
        self.peak: dict[str, float] = defaultdict(float)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def rss_mb(self) -> float:
        try:
            with open(f"/proc/{self._pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")

    async def _run(self) -> None:
        import httpx
        from prometheus_client.parser import text_string_to_metric_families

        wanted = {"turnflow_lookahead_records", "turnflow_lookahead_bytes",
                  "turnflow_lookahead_passed_over_records",
                  "turnflow_lookahead_passed_over_age_seconds",
                  "turnflow_lookahead_reread_records"}
        async with httpx.AsyncClient(timeout=2) as client:
            while True:
                self.peak["rss_mb"] = max(self.peak["rss_mb"], self.rss_mb())
                try:
                    text = (await client.get(f"http://127.0.0.1:{self._port}/metrics")).text
                except httpx.HTTPError:
                    text = ""
                for family in text_string_to_metric_families(text):
                    if family.name in wanted:
                        value = sum(s.value for s in family.samples
                                    if not s.name.endswith("_created"))
                        self.peak[family.name] = max(self.peak[family.name], value)
                await asyncio.sleep(0.2)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


# -- the run ----------------------------------------------------------------------------------


async def _flood_phase(
    name: str, producer: Producer, replies: Replies, args: argparse.Namespace, run: str,
    with_trickle: bool,
) -> Phase:
    phase = Phase(name)
    stop, begin = asyncio.Event(), asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    if with_trickle:
        tasks.append(asyncio.create_task(_trickle(
            producer, run, args.workspaces, args.trickle_conversations,
            args.trickle_every_ms / 1000, stop, phase.trickle,
        )))
        tasks.append(asyncio.create_task(_newcomers(
            producer, run, args.newcomer_every_ms / 1000, begin, stop, phase.newcomers,
        )))
    started = time.time()
    phase.flood = await _send_flood(producer, run, args)
    # Generous: a shared host may run several times slower than the slots allow.
    bound = 60 + len(phase.flood) * args.latency_ms / 1000 / args.max_in_flight * 20
    try:
        if with_trickle:
            # New customers of the flooding workspace write once every conversation of the
            # flood had a turn: from then on, "nothing served yet" sets them apart. During a
            # broadcast (one input per conversation) they write from its first reply on.
            first = 1 if args.broadcast else args.flood_conversations
            await replies.until(set(phase.flood), within=bound, at_least=first)
            begin.set()
        await replies.until(set(phase.flood), within=bound)
    finally:
        stop.set()
        begin.set()
        await asyncio.gather(*tasks)
    phase.flood_s = max(replies.stamps[i][0] for i in phase.flood) / 1000 - started
    await replies.until(set(phase.trickle) | set(phase.newcomers), within=60)
    return phase


async def _trickle_phase(
    producer: Producer, replies: Replies, args: argparse.Namespace, run: str
) -> Phase:
    phase = Phase("trickle alone")
    stop, begin = asyncio.Event(), asyncio.Event()
    begin.set()
    tasks = [
        asyncio.create_task(_trickle(
            producer, run, args.workspaces, args.trickle_conversations,
            args.trickle_every_ms / 1000, stop, phase.trickle,
        )),
        asyncio.create_task(_newcomers(
            producer, run, args.newcomer_every_ms / 1000, begin, stop, phase.newcomers,
        )),
    ]
    await asyncio.sleep(args.trickle_seconds)
    stop.set()
    await asyncio.gather(*tasks)
    await replies.until(set(phase.trickle) | set(phase.newcomers), within=60)
    return phase


async def run_once(servers: Servers, args: argparse.Namespace) -> int:
    await store_registry_agents(servers.database_url, args.workspaces, dict(
        item.split("=", 1) for item in args.plans
    ))
    topics = await fresh_topics(servers, args.partitions)
    port = free_port()
    env = dict(os.environ)
    env.pop("TURNFLOW_CRASH_AT", None)
    env.update(topics)
    env.update({
        "PYTHONPATH": str(REPO),
        "DATABASE_URL": servers.database_url,
        "KAFKA_BOOTSTRAP_SERVERS": servers.bootstrap,
        "GROUP_ID": f"bench-{uuid.uuid4().hex[:8]}",
        "AGENT_REGISTRY": "true",
        LATENCY_ENV: str(args.latency_ms),
        "MAX_IN_FLIGHT": str(args.max_in_flight),
        "METRICS_PORT": str(port),
        "METRICS_HOST": "127.0.0.1",
        "CONSUME_WORKERS": "1",
        "KAFKA_IDEMPOTENT_PRODUCER": "false" if servers.embedded_broker else "true",
        "MERGE_BURSTS": "true" if args.merge_bursts else "false",
    })
    if servers.embedded_broker:
        env["KAFKA_FETCH_MAX_WAIT_MS"] = "10"
    model = None
    if args.model == "http":
        from tests.fixtures.stand_in_model import StandInModel

        connections = Path(tempfile.mkdtemp(prefix="turnflow-fairness-")) / "connections"
        model = StandInModel(free_port(), delay=args.latency_ms / 1000,
                             keep_alive=not args.model_closes, connections=str(connections))
        model.start()
        env.pop(LATENCY_ENV, None)
        env[POOL_ENV] = args.model_pool
        env.update({"OPENAI_BASE_URL": model.base_url, "TURNFLOW_MODEL": "stand-in"})
    for item in args.env:
        name, _, value = item.partition("=")
        env[name] = value
    try:
        return await _run_consumer(env, servers, topics, port, args)
    finally:
        if model is not None:
            model.kill()
            opened = len(connections.read_text().splitlines()) if connections.exists() else 0
            print(f"model server: {opened:,} connections accepted (pool "
                  f"{args.model_pool}, server {'closes' if args.model_closes else 'keeps'} "
                  "them)")


async def _run_consumer(
    env: dict[str, str], servers: Servers, topics: dict[str, str], port: int,
    args: argparse.Namespace,
) -> int:
    consumer = _StandInConsumer(env)
    producer = Producer(servers.bootstrap, topics["INBOUND_TOPIC"])
    replies = Replies(servers.bootstrap, topics["MESSAGES_TOPIC"])
    await producer.start()
    await replies.start()
    phases: list[Phase] = []
    sampler: Sampler | None = None
    try:
        await consumer.start()
        sampler = Sampler(consumer.pid, port)
        rss_start = sampler.rss_mb()
        run = uuid.uuid4().hex[:6]
        # A short warm-up: agents built, connections open, before anything is measured.
        warm = await producer.send([(f"warm-{run}-{w}", f"agent-ws-{w}")
                                    for w in range(args.workspaces)])
        await replies.until(set(warm), within=60)
        rss_idle = sampler.rss_mb()
        phases.append(await _trickle_phase(producer, replies, args, f"{run}a"))
        print("  done: trickle alone", flush=True)
        phases.append(await _flood_phase("flood alone", producer, replies, args, f"{run}b",
                                         with_trickle=False))
        print("  done: flood alone", flush=True)
        sampler.start()
        phases.append(await _flood_phase("flood + trickle", producer, replies, args,
                                         f"{run}c", with_trickle=True))
        print("  done: flood with the trickle", flush=True)
    finally:
        if sampler is not None:
            await sampler.stop()
        await consumer.stop()
        await replies.stop()
        await producer.stop()
    return _report(args, servers, phases, producer, replies, sampler, rss_start, rss_idle,
                   consumer)


class _StandInConsumer(ConsumerProcess):
    """The e2e benchmark's consumer process, started through ``consume_with_stand_in``."""

    def command(self) -> tuple[list[str], Path]:
        return [sys.executable, "-m", "bench.fairness_bench", STAND_IN_FLAG], REPO


def _report(
    args: argparse.Namespace, servers: Servers, phases: list[Phase], producer: Producer,
    replies: Replies, sampler: Sampler | None, rss_start: float, rss_idle: float,
    consumer: ConsumerProcess,
) -> int:
    alone, flood_alone, together = phases
    lat_alone = alone.latencies(producer, replies)
    lat_during = together.latencies(producer, replies)
    p50a, p99a = percentile(lat_alone, 0.5), percentile(lat_alone, 0.99)
    p50d, p99d = percentile(lat_during, 0.5), percentile(lat_during, 0.99)
    rate_alone = flood_alone.flood_rate() or float("nan")
    rate_together = together.flood_rate() or float("nan")
    print()
    print(servers_line(servers) + f"model {args.latency_ms} ms a call; "
          f"MAX_IN_FLIGHT={args.max_in_flight}; {args.partitions} partitions; "
          f"{args.workspaces} workspaces; "
          + (f"broadcast of {args.broadcast} starts; " if args.broadcast else
             f"flood {args.flood} messages over {args.flood_conversations} conversations; ")
          + f"model {args.model}; trickle {args.trickle_conversations} "
          f"conversation(s) per other workspace, one message each every "
          f"{args.trickle_every_ms} ms; bursts {'merged' if args.merge_bursts else 'not merged'}"
          + (f"; env {' '.join(args.env)}" if args.env else ""))
    print(f"{'phase':<16} {'trickle n':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'flood n':>8} {'flood/s':>8}")
    for phase in phases:
        lat = phase.latencies(producer, replies)
        rate = phase.flood_rate()
        print(f"{phase.name:<16} {len(lat):>9} {percentile(lat, 0.5):>8.0f} "
              f"{percentile(lat, 0.99):>8.0f} "
              f"{max(lat, default=float('nan')):>8.0f} {len(phase.flood):>8} "
              f"{rate if rate is not None else float('nan'):>8.1f}")
    print()
    print(f"trickle p50 during the flood / alone: {p50d / p50a:.2f}x "
          f"({p50d:.0f} / {p50a:.0f} ms)")
    bound = 2 * p99a + 1000
    print(f"trickle p99 during the flood: {p99d:.0f} ms; target <= 2 x p99 alone + 1 s = "
          f"{bound:.0f} ms: {'met' if p99d <= bound else 'NOT met'} ({p99d / p99a:.2f}x alone)")
    new_alone = alone.newcomer_latencies(producer, replies)
    new_during = together.newcomer_latencies(producer, replies)
    if new_alone and new_during:
        n50a, n99a = percentile(new_alone, 0.5), percentile(new_alone, 0.99)
        n50d, n99d = percentile(new_during, 0.5), percentile(new_during, 0.99)
        new_bound = 2 * n99a + 1000
        print(f"new customers of the flooding workspace ({len(new_during)} during, "
              f"{len(new_alone)} alone): p50 {n50d:.0f} / {n50a:.0f} ms ({n50d / n50a:.2f}x); "
              f"p99 {n99d:.0f} ms, max {max(new_during):.0f} ms; target <= 2 x p99 alone + 1 s "
              f"= {new_bound:.0f} ms: {'met' if n99d <= new_bound else 'NOT met'}")
    print(f"flood throughput with the trickle / alone: {rate_together / rate_alone:.2f}x "
          f"(target >= 0.90: {'met' if rate_together >= 0.9 * rate_alone else 'NOT met'})")
    if sampler is not None:
        records = sampler.peak.get("turnflow_lookahead_records")
        size = sampler.peak.get("turnflow_lookahead_bytes")
        shown = "not exported" if records is None else (
            f"{records:.0f} records, {size / 1e6:.1f} MB of record bytes" if size is not None
            else f"{records:.0f} records")
        print(f"look-ahead at its peak (sampled): {shown}; consumer RSS {rss_start:.0f} MB at "
              f"start, {rss_idle:.0f} MB warm, {sampler.peak['rss_mb']:.0f} MB at the flood's "
              f"peak")
        print(f"passed over at its peak (sampled): "
              f"{sampler.peak.get('turnflow_lookahead_passed_over_records', 0):.0f} records, the "
              f"oldest {sampler.peak.get('turnflow_lookahead_passed_over_age_seconds', 0):.1f} s "
              f"old; records read again: "
              f"{sampler.peak.get('turnflow_lookahead_reread_records', 0):.0f}")
    problems = [p for phase in phases for p in _check(phase, producer, replies)]
    if consumer.troubles:
        told = ", ".join(f"{n} {what}" for what, n in sorted(consumer.troubles.items()))
        print(f"NOTE: not every turn ran once: {told}")
    print("checks: " + ("nothing lost, nothing answered twice, no conversation reordered"
                        if not problems else "; ".join(problems)))
    return 1 if problems else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--broker", choices=("kafka", "tansu"), default="kafka",
                        help="broker started for the run when KAFKA_BOOTSTRAP_SERVERS is unset")
    parser.add_argument("--latency-ms", type=int, default=200)
    parser.add_argument("--workspaces", type=int, default=2,
                        help="workspaces in all: one floods, the others trickle")
    parser.add_argument("--flood", type=int, default=6000)
    parser.add_argument("--broadcast", type=int, default=0, metavar="N",
                        help="instead of the flood: the host's start of the agent's flow for N "
                        "customers of ws-0 (one conversation each)")
    parser.add_argument("--model", choices=("in-process", "http"), default="in-process",
                        help="the stand-in model in the consumer process, or an OpenAI-compatible "
                        "stand-in server over HTTP answering after --latency-ms")
    parser.add_argument("--model-pool", choices=("sized", "httpx-default"), default="sized",
                        help="--model http: the provider's connection pool as the service sizes "
                        "it (as many kept alive as opened), or httpx's default (20 kept alive)")
    parser.add_argument("--model-closes", action="store_true",
                        help="--model http: the server closes each connection after one reply "
                        "(by default it keeps connections alive, as model servers do)")
    parser.add_argument("--flood-conversations", type=int, default=600)
    parser.add_argument("--trickle-conversations", type=int, default=2,
                        help="conversations of each trickling workspace")
    parser.add_argument("--trickle-every-ms", type=int, default=1000)
    parser.add_argument("--trickle-seconds", type=float, default=8.0,
                        help="length of the trickle-alone phase")
    parser.add_argument("--newcomer-every-ms", type=int, default=500,
                        help="a new customer of the flooding workspace this often (alone, and "
                        "during the flood once each of its conversations had a turn)")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--max-in-flight", type=int, default=64)
    parser.add_argument("--merge-bursts", action="store_true",
                        help="merge a conversation's waiting messages into one turn (off: one "
                        "turn per message, the flood's worst case)")
    parser.add_argument("--plans", action="append", default=[], metavar="WS=PLAN",
                        help="a workspace's plan (workspaces are ws-0 (the flood), ws-1, ...)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for the consumer process")
    parser.add_argument("--quick", action="store_true",
                        help="a smaller flood (2,000 over 200 conversations)")


def main() -> int:
    if sys.argv[1:] == [STAND_IN_FLAG]:
        return consume_with_stand_in()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.flood, args.flood_conversations = 2000, 200
    if args.workspaces < 2:
        parser.error("--workspaces must be at least 2")
    with ExitStack() as stack:
        servers = start_servers(stack, prefix="turnflow-fairness", broker=args.broker)
        return asyncio.run(run_once(servers, args))


if __name__ == "__main__":
    sys.exit(main())
