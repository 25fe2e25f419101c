"""Burst benchmark: model calls and replies when customers send several messages in a row.

Conversations send bursts of 3 messages spread over less than a second (the 2nd 0.2-0.5 s and
the 3rd 0.6-0.95 s after the 1st), then wait for the answer, then send the next burst. The model
answers after a fixed latency (``--latency-ms``, default 200). The same traffic goes, at the
same time, to consumers that differ only in how they treat a burst, each on its own topics,
group and agent:

- ``off``: ``MERGE_BURSTS=false``, one turn per message;
- ``on``: merging, ``BURST_WINDOW_MS=0`` (the default: merge only what already waits);
- ``on+window``: merging with ``BURST_WINDOW_MS`` = ``--window-ms`` (default 1000).

The agent is the demo agent (examples/demo_agent.py) behind the offline rule provider with the
latency. Printed per consumer: turns, model calls per customer message, model-written replies
per burst, all reply records per burst, and the p50/p95 time from a burst's last message to the
first reply of the turn that answered it.

    python -m bench.burst_bench [--sessions 40] [--bursts 3] [--latency-ms 200]
    make bench-bursts ARGS="--sessions 20"

Servers: ``DATABASE_URL`` (a scratch database is created there and dropped), else an embedded
PostgreSQL; ``KAFKA_BOOTSTRAP_SERVERS``, else the embedded broker. Load goes to those servers
only, and the run ends after a bounded time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from bench.harness.percentiles import percentile
from bench.harness.report import servers_line
from bench.harness.servers import Servers, start_servers
from bench.harness.stand_in_model import LatencyProvider
from bench.harness.topics import fresh_topics

BURSTS = [
    ["hi", "my name is Ana", "I need to book a repair"],
    ["a tune-up", "on friday", "thanks"],
    ["yes", "that's right", "book it"],
]


@dataclass
class Variant:
    """One consumer of the comparison and what it saw."""

    name: str
    overrides: dict[str, Any]
    provider: LatencyProvider | None = None
    topics: dict[str, str] = field(default_factory=dict)
    sent_at: dict[tuple[str, int], float] = field(default_factory=dict)
    answered_at: dict[tuple[str, int], float] = field(default_factory=dict)
    replies: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0


def _settings(servers: Servers, variant: Variant) -> Any:
    from consumer.settings import Settings

    return Settings(
        kafka_bootstrap_servers=servers.bootstrap,
        database_url=servers.database_url,
        kafka_idempotent_producer=not servers.embedded_broker,
        kafka_fetch_max_wait_ms=10 if servers.embedded_broker else 100,
        inbound_topic=variant.topics["INBOUND_TOPIC"],
        messages_topic=variant.topics["MESSAGES_TOPIC"],
        schedule_topic=variant.topics["SCHEDULE_TOPIC"],
        dlq_topic=variant.topics["DLQ_TOPIC"],
        group_id=f"bench-bursts-{variant.name}-{uuid.uuid4().hex[:6]}",
        metrics_port=0,
        max_in_flight=64,
        **variant.overrides,
    )


async def _read_replies(servers: Servers, variant: Variant, stop: asyncio.Event) -> None:
    """Keep every reply record; note when each burst got its first one."""
    from aiokafka import AIOKafkaConsumer

    reader = AIOKafkaConsumer(
        variant.topics["MESSAGES_TOPIC"], bootstrap_servers=servers.bootstrap,
        auto_offset_reset="earliest", enable_auto_commit=False, group_id=None,
    )
    await reader.start()
    try:
        while not stop.is_set():
            batch = await reader.getmany(timeout_ms=100)
            now = time.monotonic()
            for records in batch.values():
                for record in records:
                    value = json.loads(record.value)
                    variant.replies.append(value)
                    # The turn that answered a burst's last message ("<session>-<burst>2").
                    tail = str(value.get("input_id") or "").rsplit("-", 1)[-1]
                    if len(tail) == 2 and tail.isdigit() and tail[1] == "2":
                        variant.answered_at.setdefault((value["session_id"], int(tail[0])), now)
    finally:
        await reader.stop()


async def _conversation(producer: Any, variant: Variant, session_id: str, bursts: int,
                        rng: random.Random) -> None:
    """Send ``bursts`` bursts of 3, each after the previous one was answered (or 10 s)."""
    topic = variant.topics["INBOUND_TOPIC"]
    await asyncio.sleep(rng.uniform(0, 1.0))
    for b in range(bursts):
        offsets = [0.0, rng.uniform(0.2, 0.5), rng.uniform(0.6, 0.95)]
        start = time.monotonic()
        for i, (text, at) in enumerate(zip(BURSTS[b % len(BURSTS)], offsets, strict=True)):
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            record = {"session_id": session_id, "message": text, "id": f"{session_id}-{b}{i}"}
            await producer.send_and_wait(
                topic, json.dumps(record).encode(), key=session_id.encode()
            )
        variant.sent_at[(session_id, b)] = time.monotonic()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            # The answer to the burst's last message: a reply whose input id is the last one's.
            if any(r.get("input_id") == f"{session_id}-{b}2" for r in variant.replies):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(rng.uniform(0.5, 1.5))


async def _run(servers: Servers, args: argparse.Namespace) -> list[Variant]:
    from aiokafka import AIOKafkaProducer

    from consumer.turns.service import ConsumerService
    from examples.demo_agent import build_agent

    variants = [
        Variant("off", {"merge_bursts": False}),
        Variant("on", {"merge_bursts": True, "burst_window_ms": 0}),
        Variant("on+window", {"merge_bursts": True, "burst_window_ms": args.window_ms}),
    ]
    stop_reading = asyncio.Event()
    services: list[tuple[ConsumerService, asyncio.Task[None]]] = []
    readers: list[asyncio.Task[None]] = []
    for variant in variants:
        variant.topics = await fresh_topics(servers, args.partitions)
        variant.provider = LatencyProvider(args.latency_ms / 1000)
        service = ConsumerService(_settings(servers, variant), build_agent(variant.provider),
                                  run_relay=False, client_id=f"bench-{variant.name}")
        services.append((service, asyncio.create_task(service.run())))
        readers.append(asyncio.create_task(_read_replies(servers, variant, stop_reading)))
    async with asyncio.timeout(60):
        # The service has no event for "partitions assigned": poll its assignment.
        while not all(s.assignment for s, _ in services):  # noqa: ASYNC110
            await asyncio.sleep(0.1)
    producer = AIOKafkaProducer(bootstrap_servers=servers.bootstrap, linger_ms=0)
    await producer.start()
    try:
        async with asyncio.timeout(60 + args.bursts * 15):
            await asyncio.gather(*(
                _conversation(producer, v, f"{v.name}-{n}-{uuid.uuid4().hex[:4]}", args.bursts,
                              random.Random(n))
                for v in variants for n in range(args.sessions)
            ))
        await asyncio.sleep(2.0)  # late replies
    finally:
        await producer.stop()
        stop_reading.set()
        await asyncio.gather(*readers, return_exceptions=True)
        for service, task in services:
            service.stop()
            await asyncio.gather(task, return_exceptions=True)
    return variants


def _row(variant: Variant, bursts: int) -> list[str]:
    assert variant.provider is not None
    messages = bursts * 3
    unique = {(r["session_id"], r["key"]): r for r in variant.replies}  # delivery dedupes by key
    replies = list(unique.values())
    ai = sum(1 for r in replies if r.get("kind") == "ai")
    waits = [
        (variant.answered_at[k] - variant.sent_at[k]) * 1000
        for k in variant.sent_at if k in variant.answered_at
    ]
    p50 = percentile(waits, 0.5) if waits else float("nan")
    p95 = percentile(waits, 0.95) if waits else float("nan")
    turns = len({(r["session_id"], r["version"]) for r in replies})
    return [
        variant.name,
        str(turns),
        f"{variant.provider.calls / messages:.2f}",
        f"{ai / bursts:.2f}",
        f"{len(replies) / bursts:.2f}",
        f"{p50:.0f}",
        f"{p95:.0f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=40, help="conversations per consumer")
    parser.add_argument("--bursts", type=int, default=3, help="bursts each conversation sends")
    parser.add_argument("--latency-ms", type=int, default=200, help="model latency per call")
    parser.add_argument("--window-ms", type=int, default=1000,
                        help="BURST_WINDOW_MS of the on+window consumer")
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    if not 1 <= args.bursts <= 9:
        parser.error("--bursts must be 1 to 9 (a message id carries its burst as one digit)")
    with ExitStack() as stack:
        servers = start_servers(stack)
        print(servers_line(servers) + f"{args.sessions} conversations per consumer, "
              f"{args.bursts} bursts of 3 messages each, model latency {args.latency_ms} ms, "
              f"BURST_WINDOW_MS={args.window_ms} for on+window")
        variants = asyncio.run(_run(servers, args))
    bursts = args.sessions * args.bursts
    header = ["merging", "turns with replies", "model calls / message", "AI replies / burst",
              "reply records / burst", "p50 ms", "p95 ms"]
    rows = [header] + [_row(v, bursts) for v in variants]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))
    print("p50/p95: a burst's last message sent to the first reply of the turn answering it.")


if __name__ == "__main__":
    main()
