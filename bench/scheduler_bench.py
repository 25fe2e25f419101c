"""Scheduler benchmark: how fast due timers become wakes, and how late they fire.

Two scenarios against a real PostgreSQL and a Kafka-compatible broker:

- burst: ``--timers`` entries (default 10,000) all due at the same instant, ``--lead`` seconds
  after they are written to the schedule topic of idle schedulers; prints wakes/s and the
  fire-delay percentiles.
- trickle: ``--trickle`` entries (default 200) due at random instants over ``--trickle-span``
  seconds, so the scheduler sleeps between most of them; prints the fire-delay percentiles of an
  idle scheduler, the figure the "p99 under 1 s after due" target is about.

Fire delay of a wake = its record timestamp (set by the scheduler's producer when it sends)
minus the timer's due time. Both clocks are this host's, as are the database's.

    python -m bench.scheduler_bench [--timers 10000] [--replicas 1] [--trickle 200] [--pending N]

``--pending N`` first seeds N timers of other conversations due a year on (as a busy agent
has: a reminder per conversation), so every statement runs beside a large table; each scenario
then also prints how often the schedulers counted the pending timers, and how long that took.

``DATABASE_URL`` / ``KAFKA_BOOTSTRAP_SERVERS`` pick the servers; unset, it uses an embedded
PostgreSQL and the embedded Tansu broker. It works in a fresh database and fresh topics and
drops the database afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime, timedelta

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.harness.percentiles import percentile
from bench.harness.servers import Servers, start_servers
from consumer.scheduler.service import FiringOptions, build_scheduler
from consumer.topics import TopicSpec, ensure_topics
from store import Store
from store.urls import plain_url

PARTITIONS = 12


async def db_now(store_url: str) -> datetime:
    connection = await asyncpg.connect(plain_url(store_url))
    try:
        value: datetime = await connection.fetchval("SELECT now()")
        return value
    finally:
        await connection.close()


class WakeCollector:
    """Reads every wake from the inbound topic, recording each record's timestamp."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.stamps: dict[str, float] = {}
        self.duplicates = 0
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
        )

    async def start(self) -> None:
        await self._consumer.start()
        self._consumer.assign([TopicPartition(self.topic, p) for p in range(PARTITIONS)])
        await self._consumer.seek_to_beginning()

    async def stop(self) -> None:
        await self._consumer.stop()

    async def collect(self, expected: int, patience: float) -> None:
        """Read until ``expected`` distinct wakes arrived or ``patience`` seconds passed."""
        deadline = time.monotonic() + patience
        while len(self.stamps) < expected and time.monotonic() < deadline:
            fetched = await self._consumer.getmany(timeout_ms=200, max_records=5000)
            for records in fetched.values():
                for record in records:
                    assert record.value is not None
                    key = json.loads(record.value)["wake"]
                    if key in self.stamps:
                        self.duplicates += 1
                    self.stamps[key] = record.timestamp / 1000


async def produce_schedule(
    bootstrap: str, topic: str, due: list[tuple[str, datetime]]
) -> None:
    """Write the entries to the schedule topic as the consumer's outbox would."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        acks = []
        for i, (key, at) in enumerate(due):
            session_id = f"s{i % 997}"
            value = {"session_id": session_id, "key": key, "at": at.isoformat(), "replaces": None}
            acks.append(
                await producer.send(topic, json.dumps(value).encode(), key=session_id.encode())
            )
        await asyncio.gather(*acks)
    finally:
        await producer.stop()


def percentiles(delays: list[float]) -> dict[str, float]:
    ordered = sorted(delays)
    return {
        "p50": percentile(ordered, 0.50),
        "p90": percentile(ordered, 0.90),
        "p99": percentile(ordered, 0.99),
        "max": ordered[-1],
        "mean": statistics.fmean(ordered),
    }


def show(label: str, stats: dict[str, float]) -> str:
    parts = " ".join(f"{name}={value * 1000:.0f}ms" for name, value in stats.items())
    return f"{label}: {parts}"


class CountedPending:
    """Counts and times a store's ``timers_pending`` (the gauge's count of the whole table)."""

    def __init__(self, store: Store) -> None:
        self.calls = 0
        self.seconds = 0.0
        self._inner = store.timers_pending

    async def __call__(self) -> int:
        began = time.perf_counter()
        try:
            return await self._inner()
        finally:
            self.calls += 1
            self.seconds += time.perf_counter() - began


async def seed_pending(url: str, count: int) -> None:
    """``count`` timers of other conversations, due a year from now, then ANALYZE."""
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(
            "INSERT INTO timers (session_id, key, at) SELECT 'idle-' || g, 'remind',"
            " now() + interval '365 days' + (g || ' seconds')::interval"
            f" FROM generate_series(1, {int(count)}) AS g; ANALYZE timers"
        )
    finally:
        await connection.close()


async def due_left(url: str, until: datetime) -> int:
    """Timers due by ``until`` still in the table (the seeded ones are due much later)."""
    connection = await asyncpg.connect(url)
    try:
        left: int = await connection.fetchval("SELECT count(*) FROM timers WHERE at <= $1", until)
        return left
    finally:
        await connection.close()


async def run_scenario(
    *,
    url: str,
    bootstrap: str,
    replicas: int,
    options: FiringOptions,
    make_due: Callable[[datetime], list[tuple[str, datetime]]],
    patience: float,
) -> tuple[WakeCollector, list[tuple[str, datetime]]]:
    """Start the schedulers, then store ``make_due(db now)`` and collect every wake."""
    names = {base: f"{base}.bench.{uuid.uuid4().hex[:8]}" for base in ("schedule", "inbound")}
    await ensure_topics(bootstrap, [TopicSpec(n, partitions=PARTITIONS) for n in names.values()])
    stores = [await Store.connect(url, pool_size=4) for _ in range(replicas)]
    counted = [CountedPending(store) for store in stores]
    for store, counter in zip(stores, counted, strict=True):
        store.timers_pending = counter  # type: ignore[method-assign]
    stop = asyncio.Event()
    schedulers = [
        build_scheduler(
            store,
            bootstrap_servers=bootstrap,
            schedule_topic=names["schedule"],
            inbound_topic=names["inbound"],
            group_id=f"bench-{uuid.uuid4().hex[:8]}",
            options=options,
        )
        for store in stores
    ]
    tasks = [asyncio.create_task(s.run(stop)) for s in schedulers]
    collector = WakeCollector(bootstrap, names["inbound"])
    await collector.start()
    try:
        # `ready` is a plain flag (what /readyz serves); polling it is what a probe does.
        while not all(s.ready for s in schedulers):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        due = make_due(await db_now(url))
        await produce_schedule(bootstrap, names["schedule"], due)
        # Read the wakes only once they are all out, so reading never competes with firing
        # for this process's CPU; a wake's timestamp was set when it was sent.
        deadline = time.monotonic() + patience
        await asyncio.sleep(max(at for _, at in due).timestamp() - time.time())
        # The table is the only signal that firing is done; polling it is the point.
        last_due = max(at for _, at in due)
        while await due_left(url, last_due) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        await collector.collect(len(due), max(deadline - time.monotonic(), 5.0))
        calls = sum(c.calls for c in counted)
        print(f"  pending-timer counts: {calls}, {sum(c.seconds for c in counted) * 1000:.0f} ms"
              " in all")
        return collector, due
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        await collector.stop()
        for store in stores:
            await store.close()


async def main(args: argparse.Namespace, servers: Servers) -> int:
    bootstrap, url = servers.bootstrap, servers.database_url
    options = FiringOptions(batch_size=args.batch_size, pipeline=args.pipeline)
    if args.pending:
        await seed_pending(url, args.pending)
    print(
        f"scheduler bench: replicas={args.replicas} batch={options.batch_size} "
        f"pipeline={options.pipeline} pending={args.pending:,} broker={bootstrap}"
    )

    # burst: every timer due at one instant, `lead` seconds after the entries are written.
    def burst(now: datetime) -> list[tuple[str, datetime]]:
        at = now + timedelta(seconds=args.lead)
        return [(f"burst-{i}", at) for i in range(args.timers)]

    collector, due = await run_scenario(
        url=url, bootstrap=bootstrap, replicas=args.replicas, options=options, make_due=burst,
        patience=300,
    )
    delays = [collector.stamps[k] - at.timestamp() for k, at in due if k in collector.stamps]
    fired = len(delays)
    span = max(delays) if delays else float("nan")
    print(
        f"burst: {fired}/{args.timers} fired, duplicates={collector.duplicates}, "
        f"last {span:.2f}s after due, {fired / span:,.0f} wakes/s"
    )
    if delays:
        print(show("burst fire delay", percentiles(delays)))

    # trickle: timers at random instants; the schedulers sleep between them.
    rng = random.Random(7)

    def trickle(now: datetime) -> list[tuple[str, datetime]]:
        start = now + timedelta(seconds=args.lead)
        return [
            (f"trickle-{i}", start + timedelta(seconds=rng.uniform(0, args.trickle_span)))
            for i in range(args.trickle)
        ]

    collector, due = await run_scenario(
        url=url, bootstrap=bootstrap, replicas=args.replicas, options=options, make_due=trickle,
        patience=args.lead + args.trickle_span + 60,
    )
    trickle_delays = [
        collector.stamps[k] - at.timestamp() for k, at in due if k in collector.stamps
    ]
    print(
        f"trickle: {len(trickle_delays)}/{args.trickle} fired over {args.trickle_span:.0f}s, "
        f"duplicates={collector.duplicates}"
    )
    if trickle_delays:
        print(show("trickle fire delay", percentiles(trickle_delays)))
    ok = len(trickle_delays) == args.trickle and fired == args.timers
    return 0 if ok else 1


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--timers", type=int, default=10_000, help="burst size")
    parser.add_argument("--replicas", type=int, default=1, help="schedulers on one table")
    parser.add_argument("--batch-size", type=int, default=FiringOptions.batch_size)
    parser.add_argument("--pipeline", type=int, default=FiringOptions.pipeline)
    parser.add_argument("--trickle", type=int, default=200, help="timers spread over time")
    parser.add_argument("--trickle-span", type=float, default=10.0, help="seconds")
    parser.add_argument("--lead", type=float, default=3.0, help="seconds from store to due")
    parser.add_argument("--pending", type=int, default=0,
                        help="other conversations' timers, due a year on, seeded first")
    return parser.parse_args(argv)


def _check(args: argparse.Namespace) -> None:
    if min(args.timers, args.replicas, args.trickle, args.batch_size, args.pipeline) < 1:
        raise SystemExit("counts and sizes must be positive")
    if args.pending < 0:
        raise SystemExit("--pending must be 0 or more")


if __name__ == "__main__":
    arguments = parse_args(sys.argv[1:])
    _check(arguments)
    with ExitStack() as stack:
        code = asyncio.run(main(arguments, start_servers(stack, prefix="turnflow-scheduler")))
    sys.exit(code)
