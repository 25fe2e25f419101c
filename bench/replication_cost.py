"""What a standby costs a turn's save: synchronous standby, asynchronous standby, none.

One primary and one streaming standby (PostgreSQL's own binaries, as the failover tests start
them: ``tests/fixtures/postgres_pair.py``) on this host, migrated. The same saves then run
against the primary in three settings, side by side in one run:

- ``sync``: ``synchronous_standby_names`` names the standby, so a commit returns once the
  standby flushed it;
- ``async``: the standby streams, nobody waits for it;
- ``none``: the standby is stopped.

For each: one saver alone (``Store.save_turn`` back to back: the latency of a save, p50 and
p99) and ``--clients`` savers through the consumer's ``SaveGroup`` (group commit: saves per
second). Each save is a full turn save (session update, turn-log row, a reply and a timer in
the outbox). The primary runs with ``fsync=off`` like the tests' (a local flush would hide
what the network round trip to the standby costs), so the ratios, not the absolute times,
are the result; on one host the standby is a loopback round trip away, a real one is further.

    python -m bench.replication_cost [--seconds 4] [--clients 16] [--rounds 2]

Needs the PostgreSQL server binaries (``TURNFLOW_PG_BIN``, default /usr/lib/postgresql/15/bin);
as root they run as the ``postgres`` user.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from bench.harness.percentiles import percentile
from consumer.groups import SaveGroup
from store import OutboxEntry, SaveRequest, SourceRecord, Store, TurnRecord, migrate
from tests.fixtures.postgres_pair import PostgresPair


def _request(session_id: str, version: int, offset: int) -> SaveRequest:
    reply = {"kind": "ai", "text": "Qual é o seu e-mail?", "key": f"{session_id}:{version}:0",
             "after_ms": 0, "run_id": "r1", "step_id": "ask_email"}
    timer = {"key": f"{session_id}:remind", "at": "2026-11-30T07:00:00Z", "replaces": None}
    return SaveRequest(
        session_id=session_id,
        expected_version=version,
        state={"id": session_id, "v": 4, "data": {f"f{i}": f"value {i} " * 4 for i in range(20)},
               "runs": [], "claims": {}, "inputs": [], "metadata": {}},
        turn=TurnRecord(
            input={"session_id": session_id, "message": "oi", "id": f"wamid.{offset}"},
            messages=[reply],
            schedule=[timer],
            outcomes=[{"code": "asked", "detail": None}],
            llm_calls=1,
            source=SourceRecord(topic="bench.replication", partition=0, offset=offset),
        ),
        outbox=[
            OutboxEntry("outbound.messages", session_id, {**reply, "session_id": session_id}),
            OutboxEntry("outbound.schedule", session_id, {**timer, "session_id": session_id}),
        ],
    )


_offsets = iter(range(10**12))


async def _alone(store: Store, seconds: float) -> list[float]:
    """One saver, back to back: each save's latency in ms."""
    session = f"bench-{uuid.uuid4().hex[:8]}"
    latencies = []
    version = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        await store.save_turn(_request(session, version, next(_offsets)))
        latencies.append((time.perf_counter() - started) * 1000)
        version += 1
    return latencies


async def _grouped(store: Store, clients: int, seconds: float) -> float:
    """``clients`` savers through a SaveGroup: saves per second."""
    group = SaveGroup(store)
    run = uuid.uuid4().hex[:8]
    saves = 0
    deadline = time.perf_counter() + seconds

    async def saver(n: int) -> None:
        nonlocal saves
        session, version = f"bench-{run}-{n}", 0
        while time.perf_counter() < deadline:
            await group.save(_request(session, version, next(_offsets)))
            version += 1
            saves += 1

    started = time.perf_counter()
    try:
        await asyncio.gather(*(saver(n) for n in range(clients)))
    finally:
        await group.close()
    return saves / (time.perf_counter() - started)


async def _measure(url: str, seconds: float, clients: int) -> tuple[float, float, float]:
    store = await Store.connect(url, pool_size=clients, max_overflow=0)
    try:
        await _alone(store, 0.5)  # warm the pool and the prepared statements
        latencies = await _alone(store, seconds)
        rate = await _grouped(store, clients, seconds)
    finally:
        await store.close()
    return percentile(latencies, 0.5), percentile(latencies, 0.99), rate


def _mode(pair: PostgresPair, mode: str) -> None:
    standby_running = pair.standby_running()
    if mode == "none":
        pair.set_synchronous(False)
        if standby_running:
            pair.stop_standby()
        return
    if not standby_running:
        pair.start_standby()
    pair.set_synchronous(mode == "sync")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    pair = PostgresPair(synchronous=False).start()
    try:
        migrate.upgrade(pair.url)
        primary = pair.server_url(pair.primary_port)
        results: dict[str, list[tuple[float, float, float]]] = {}
        # Interleaved rounds, so a neighbour's load on the shared host falls on every mode.
        for _ in range(args.rounds):
            for mode in ("sync", "async", "none"):
                _mode(pair, mode)
                results.setdefault(mode, []).append(
                    asyncio.run(_measure(primary, args.seconds, args.clients))
                )
        print(f"{'standby':<8} {'p50 ms':>8} {'p99 ms':>8} {'saves/s':>10}  "
              f"(1 saver; {args.clients} savers grouped; median of {args.rounds} rounds)")
        base = statistics.median(r[2] for r in results["none"])
        for mode, rows in results.items():
            p50 = statistics.median(r[0] for r in rows)
            p99 = statistics.median(r[1] for r in rows)
            rate = statistics.median(r[2] for r in rows)
            print(f"{mode:<8} {p50:8.2f} {p99:8.2f} {rate:10.0f}  ({rate / base:.2f}x none)")
    finally:
        pair.stop()


if __name__ == "__main__":
    main()
