"""Hot-session benchmark: do quiet conversations keep their latency beside one very busy one?

Two ``turnflow consume`` processes run side by side on the same machine, real PostgreSQL and
broker, each on its own fresh topics (``--partitions``, default 4) and group: a *busy* one and
a *calm* one. Each has its own quiet conversations (``--quiet-sessions``, spread over the
partitions by their keys) sending paced messages (``--rate`` per second for ``--seconds``) to
both consumers at the same time, in two phases:

1. nobody is hot: a calibration of the two consumers against each other;
2. the busy consumer has ONE session with ``--hot-inputs`` (default 20,000) messages waiting,
   produced just before; a session's inputs are applied one at a time, so the backlog
   outlasts the phase. The calm consumer has none.

Latency is a quiet input's first reply record timestamp minus its input record timestamp (both
stamped by this machine's producers), p50/p95. The verdict compares, in phase 2, the busy
consumer's quiet conversations on partitions other than the hot session's with the calm
consumer's, measured over the same seconds (target: within 2x); the busy consumer's phase 2
against its own phase 1 is printed too. Quiet conversations that share the hot session's
partition are reported apart: a partition is read in offset order, so they wait with it.

    python -m bench.hot_session_bench [--quick] [--hot-inputs 20000] [--partitions 4]
    make bench-hot-session ARGS="--quick"

Servers: ``DATABASE_URL`` (a scratch database is created there and dropped), else an embedded
PostgreSQL; ``KAFKA_BOOTSTRAP_SERVERS``, else the embedded broker. Load goes to those servers
only, and every phase ends after a bounded time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

from bench.harness import REPO
from bench.harness.percentiles import percentile
from bench.harness.processes import ConsumerProcess
from bench.harness.report import servers_line
from bench.harness.servers import Servers, start_servers
from bench.harness.stand_in_model import AGENT, LATENCY_ENV
from bench.harness.topics import fresh_topics
from bench.harness.traffic import InputProducer, ReplyReader

TARGET_RATIO = 2.0


def partition_of(key: str, partitions: int) -> int:
    """The partition the default partitioner (murmur2, as the Java client) gives ``key``."""
    from aiokafka.partitioner import murmur2

    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


class QuietProducer(InputProducer):
    """Paced inputs round-robin over the quiet sessions; remembers each input's session."""

    def __init__(self, bootstrap: str, topic: str, sessions: list[str]) -> None:
        super().__init__(bootstrap, topic, sessions)
        self.session_of: dict[str, str] = {}

    def _records(self, count: int) -> Iterator[tuple[str, bytes, bytes]]:
        for input_id, key, value in super()._records(count):
            self.session_of[input_id] = key.decode()
            yield input_id, key, value


@dataclass
class Phase:
    """Quiet latencies of one phase, split by whether they share the hot session's partition;
    ``waiting`` counts inputs of the hot session's partition still unanswered at the end."""

    name: str
    apart_ms: list[float]
    beside_ms: list[float]
    waiting: int = 0
    unanswered: int = 0  # inputs of the other partitions still unanswered after the bound


def _row(name: str, values: list[float], waiting: int = 0) -> str:
    note = f"  ({waiting} unanswered at the end of the phase)" if waiting else ""
    if not values:
        return f"  {name:<52} {'-':>6} {'-':>8} {'-':>8}{note}"
    return (f"  {name:<52} {len(values):>6} {percentile(values, 0.5):>8.0f} "
            f"{percentile(values, 0.95):>8.0f}{note}")


async def _quiet_phase(
    name: str, producer: QuietProducer, replies: ReplyReader, *, rate: float, seconds: float,
    partition_by_session: dict[str, int], hot_partition: int | None,
) -> Phase:
    """Paced quiet inputs; waits for the answers on the partitions without a hot session
    (those beside one may wait behind its backlog: they are counted, not awaited)."""
    ids = await producer.paced(rate, seconds)
    beside_hot = {i for i in ids if partition_by_session[producer.session_of[i]] == hot_partition}
    try:
        await replies.until(ids - beside_hot, within=30 + seconds * 3)
    except TimeoutError:
        pass  # counted below as unanswered: a stall is a result, not a crash of the bench
    await asyncio.sleep(1.0)  # the same grace for the ones beside the hot session
    apart, beside = [], []
    for input_id in ids:
        if input_id not in replies.first_reply_ms:
            continue
        latency = float(replies.first_reply_ms[input_id] - producer.sent_ms[input_id])
        (beside if input_id in beside_hot else apart).append(latency)
    return Phase(name, apart, beside, waiting=len(beside_hot) - len(beside),
                 unanswered=len(ids) - len(beside_hot) - len(apart))


class Side:
    """One consumer process on its own topics, with its quiet conversations (and maybe a hot
    one): the bench runs two side by side, so both see the same machine at the same time."""

    def __init__(self, servers: Servers, args: argparse.Namespace, label: str) -> None:
        self.servers, self.args, self.label = servers, args, label
        run = uuid.uuid4().hex[:6]
        self.hot = f"hot-{run}"
        self.hot_partition = partition_of(self.hot, args.partitions)
        self.quiet = [f"quiet-{run}-{i}" for i in range(args.quiet_sessions)]
        self.partition_by_session = {s: partition_of(s, args.partitions) for s in self.quiet}
        self.hot_ids: set[str] = set()

    async def start(self) -> None:
        servers, args = self.servers, self.args
        topics = await fresh_topics(servers, args.partitions)
        env = dict(os.environ)
        env.pop("TURNFLOW_CRASH_AT", None)
        env.update(topics)
        env.update({
            "PYTHONPATH": str(REPO),
            "DATABASE_URL": servers.database_url,
            "KAFKA_BOOTSTRAP_SERVERS": servers.bootstrap,
            "GROUP_ID": f"bench-{uuid.uuid4().hex[:8]}",
            "AGENT": AGENT,
            LATENCY_ENV: str(args.latency),
            "METRICS_PORT": "0",
            "CONSUME_WORKERS": "1",  # one consumer process per side: one process's pause rules
            "KAFKA_IDEMPOTENT_PRODUCER": "false" if servers.embedded_broker else "true",
            # One turn per input: the hot backlog is applied one input at a time, as measured.
            "MERGE_BURSTS": "false",
        })
        if servers.embedded_broker:
            env["KAFKA_FETCH_MAX_WAIT_MS"] = "10"  # as `turnflow dev` does on this broker
        inbound = topics["INBOUND_TOPIC"]
        self.quiet_producer = QuietProducer(servers.bootstrap, inbound, self.quiet)
        self.hot_producer = InputProducer(servers.bootstrap, inbound, [self.hot])
        self.replies = ReplyReader(servers.bootstrap, topics["MESSAGES_TOPIC"])
        self.consumer = ConsumerProcess(env)
        await self.quiet_producer.start()
        await self.hot_producer.start()
        await self.replies.start()
        await self.consumer.start()

    async def stop(self) -> None:
        await self.consumer.stop()
        await self.replies.stop()
        await self.hot_producer.stop()
        await self.quiet_producer.stop()

    async def phase(self, name: str, seconds: float, *, hot: bool) -> Phase:
        return await _quiet_phase(
            name, self.quiet_producer, self.replies, rate=self.args.rate, seconds=seconds,
            partition_by_session=self.partition_by_session,
            hot_partition=self.hot_partition if hot else None,
        )

    async def start_hot_backlog(self) -> None:
        """Produce the hot session's inputs; return once the consumer answers them."""
        self.hot_ids = await self.hot_producer.send(self.args.hot_inputs)
        deadline = time.monotonic() + 60
        while not self.hot_ids & self.replies.first_reply_ms.keys():
            if time.monotonic() > deadline:
                raise TimeoutError("the hot session got no reply within 60 s")
            await asyncio.sleep(0.05)

    @property
    def hot_answered(self) -> int:
        return len(self.hot_ids & self.replies.first_reply_ms.keys())


@dataclass
class Results:
    busy_before: Phase  # the side that gets the hot session, before it comes
    calm_before: Phase  # the side that never gets one, at the same time
    busy_during: Phase
    calm_during: Phase
    hot_answered: int


async def run_once(servers: Servers, args: argparse.Namespace) -> Results:
    """Two consumers side by side: both get the same paced quiet load twice; between the two
    phases one of them ("busy") also gets the hot session's backlog."""
    busy, calm = Side(servers, args, "busy"), Side(servers, args, "calm")
    await busy.start()
    await calm.start()
    try:
        await asyncio.gather(busy.phase("warm-up", 2.0, hot=False),
                             calm.phase("warm-up", 2.0, hot=False))
        busy_before, calm_before = await asyncio.gather(
            busy.phase("before", args.seconds, hot=False),
            calm.phase("before", args.seconds, hot=False),
        )
        await busy.start_hot_backlog()
        busy_during, calm_during = await asyncio.gather(
            busy.phase("during", args.seconds, hot=True),
            calm.phase("during", args.seconds, hot=False),
        )
        hot_answered = busy.hot_answered
    finally:
        await busy.stop()
        await calm.stop()
    return Results(busy_before, calm_before, busy_during, calm_during, hot_answered)


def _ratio(label: str, numerator: list[float], denominator: list[float]) -> float:
    worst = 0.0
    parts = []
    for share, name in ((0.5, "p50"), (0.95, "p95")):
        top, bottom = percentile(numerator, share), percentile(denominator, share)
        ratio = top / max(bottom, 1.0)
        worst = max(worst, ratio)
        parts.append(f"{name} {top:.0f}/{bottom:.0f} ms = {ratio:.2f}x")
    print(f"  {label:<58} {'; '.join(parts)}")
    return worst


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="5,000 hot inputs and 6 s phases instead of 20,000 and 10 s")
    parser.add_argument("--hot-inputs", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--quiet-sessions", type=int, default=64)
    parser.add_argument("--rate", type=float, default=40.0, help="quiet inputs per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--latency", type=int, default=0, help="model latency, ms per call")


def run(args: argparse.Namespace) -> int:
    if args.quick:
        args.hot_inputs, args.seconds = 5_000, 6.0
    with ExitStack() as stack:
        servers = start_servers(stack)
        print(servers_line(servers) + f"two consumers side by side, "
              f"{args.partitions} partitions each; {args.quiet_sessions} quiet sessions each at "
              f"{args.rate:g} inputs/s for {args.seconds:g} s per phase; hot session: "
              f"{args.hot_inputs} inputs to the busy consumer; model latency {args.latency} ms",
              flush=True)
        r = asyncio.run(run_once(servers, args))

    print()
    print(f"  {'quiet conversations, first reply latency':<52} {'inputs':>6} {'p50 ms':>8} "
          f"{'p95 ms':>8}")
    print(_row("calm consumer, phase 1", r.calm_before.apart_ms))
    print(_row("busy consumer, phase 1 (no hot session yet)", r.busy_before.apart_ms))
    print(_row("calm consumer, phase 2", r.calm_during.apart_ms))
    print(_row("busy consumer, phase 2, other partitions than the hot", r.busy_during.apart_ms,
               r.busy_during.unanswered))
    print(_row("busy consumer, phase 2, the hot session's partition", r.busy_during.beside_ms,
               r.busy_during.waiting))
    print(f"  hot session: {r.hot_answered} of {args.hot_inputs} inputs answered by the end of "
          "phase 2 (one at a time, in order)")
    print()
    print("ratios (busy / calm measured at the same time; busy phase 2 / busy phase 1):")
    _ratio("phase 1, busy / calm (calibration, no hot session)",
           r.busy_before.apart_ms, r.calm_before.apart_ms)
    side_by_side = _ratio("phase 2, busy (other partitions) / calm",
                          r.busy_during.apart_ms, r.calm_during.apart_ms)
    _ratio("busy consumer, phase 2 (other partitions) / phase 1",
           r.busy_during.apart_ms, r.busy_before.apart_ms)
    verdict = "within" if side_by_side <= TARGET_RATIO else "NOT within"
    print(f"verdict: beside a hot session, quiet conversations' p50 and p95 are {verdict} "
          f"{TARGET_RATIO:g}x of normal (phase 2, busy / calm)")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))


if __name__ == "__main__":
    main()
