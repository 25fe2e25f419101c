"""Capacity benchmark: does a turn cost the same on a turn log of millions as on an empty one?

Two scratch databases in one run: one holding only the conversations the measurements use
(``--calls`` of them), one filled with ``--turns`` turns over ``--sessions`` conversations (ten
turns each by default); both spread over the last three months, one monthly partition each.
The fill is server-side SQL (``INSERT … SELECT`` over ``generate_series``, in batches, the
history entries built by the save's own expression), with the turn log's secondary indexes
built after it; the time and the disk it took are printed. Turns are of bench/turn_shape.py's
shape.

Then, on both databases, side by side:

- a save (``Store.save_turn``, one turn of an existing conversation): wall p50/p99 and the
  PostgreSQL backend's CPU per save (its ``/proc/<pid>/stat``; the server must run on this
  host), with the word search index, without any search index, and with the whole-JSON trigram
  index the search used to have;
- a conversation's load (state and history, ``Store.load``): p50;
- the inspector's search (``Reader.search`` for a customer's name) and a conversation page
  (``Reader.conversation``): p50;
- an erase (``turnflow erase``'s ``Store.erase``): p50;
- dropping the oldest month (the filled one only): one ``DROP TABLE``.

    python -m bench.capacity_bench [--turns 10000000] [--sessions 1000000] [--calls 300]
                                   [--no-json-trigrams]
    make bench-capacity ARGS="--turns 1000000"

Uses DATABASE_URL (scratch databases are created there and dropped), else an embedded
PostgreSQL. The host is what it is: run it on a quiet one, and read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import asyncpg

from bench.harness.databases import scratch_database
from bench.harness.percentiles import percentile
from bench.harness.processes import own_cpu_seconds
from bench.turn_shape import CUSTOMER, REPLIES, turn_request
from consumer.inspect.reading import Reader
from store import Store, partitions
from store.history import turn_entries
from store.search_text import SESSION_TEXT, TURN_TEXT, TURN_WORDS, like_pattern

MONTHS = 3
BATCH = 200_000

_JSON_TRIGRAMS = (
    "CREATE INDEX ix_bench_json ON turns USING gin ((coalesce(input_id, '') || ' ' "
    "|| CAST(input AS text) || ' ' || coalesce(CAST(messages AS text), '') || ' ' "
    "|| coalesce(source_topic || ':' || CAST(source_partition AS text) || ':' "
    "|| CAST(source_offset AS text), '')) gin_trgm_ops)"
)


def _fill_sql(first: int, last: int, sessions: int, per: int, start: datetime) -> str:
    """Turns ``first``..``last`` (1-based over the whole fill): turn ``g`` is version
    ``(g-1) // sessions + 1`` of conversation ``(g-1) % sessions``, at a time that grows with
    ``g`` over the three months from ``start``."""
    span = MONTHS * 28 * 86400
    total = sessions * per
    customer = CUSTOMER[0].replace("'", "''").replace("{name}", "' || 'Cliente ' || g || '")
    reply0 = REPLIES[0].replace("'", "''").replace("{name}", "' || 'Cliente ' || g || '")
    reply1 = REPLIES[1].replace("'", "''")
    return f"""
INSERT INTO turns (session_id, version, input, messages, outcomes, started, llm_calls,
                   created_at, clock_at, source_topic, source_partition, source_offset,
                   input_id, history)
SELECT t.sid, t.v, t.input, t.messages,
       '[{{"code": "understood", "run_id": "r1", "flow_id": "reschedule", "step_id": "ask_day"}},
         {{"code": "moved", "run_id": "r1", "flow_id": "reschedule", "step_id": "offer_slots"}},
         {{"code": "asked", "run_id": "r1", "flow_id": "reschedule", "step_id": "offer_slots"}}]'
       ::jsonb,
       CASE WHEN t.v = 1 THEN '[{{"run_id": "r1", "flow_id": "reschedule"}}]'::jsonb
            ELSE '[]'::jsonb END,
       2, t.at, t.at, 'inbound.turns', t.n % 12, t.n, t.input_id,
       {turn_entries("t.input", "t.messages", "t.at")}
FROM (
    SELECT g AS n, 'conv-' || ((g - 1) % {sessions}) AS sid, (g - 1) / {sessions} + 1 AS v,
           TIMESTAMPTZ '{start.isoformat()}'
               + make_interval(secs => (g * {span}.0 / {total})) AS at,
           'wamid.' || g AS input_id,
           jsonb_build_object('session_id', 'conv-' || ((g - 1) % {sessions}),
                              'message', '{customer}', 'id', 'wamid.' || g,
                              'at', '2026-12-06T09:14:07.512Z') AS input,
           jsonb_build_array(
               jsonb_build_object('session_id', 'conv-' || ((g - 1) % {sessions}),
                                  'key', 'conv-' || ((g - 1) % {sessions}) || ':' || g || ':0',
                                  'kind', 'ai', 'text', '{reply0}', 'after_ms', 0,
                                  'run_id', 'r1', 'step_id', 'offer_slots',
                                  'input_id', 'wamid.' || g),
               jsonb_build_object('session_id', 'conv-' || ((g - 1) % {sessions}),
                                  'key', 'conv-' || ((g - 1) % {sessions}) || ':' || g || ':1',
                                  'kind', 'ai', 'text', '{reply1}', 'after_ms', 800,
                                  'run_id', 'r1', 'step_id', 'offer_slots',
                                  'input_id', 'wamid.' || g)) AS messages
    FROM generate_series({first}, {last}) AS g
) AS t
"""


async def _layout(url: str) -> datetime:
    """Monthly partitions for the last three months and the next two, in place of the empty
    first partition a fresh database has; the first month's start."""
    store = await Store.connect(url, pool_size=1)
    try:
        connection = await asyncpg.connect(url)
        try:
            await connection.execute("DROP TABLE turns_p_history")
        finally:
            await connection.close()
        now = datetime.now(UTC)
        for ago in range(MONTHS, 0, -1):
            start = partitions.month_start(now, -ago)
            await partitions._attach(store.engine, partitions.partition_name(start), start,
                                     partitions.month_start(now, -ago + 1))
        await store.ensure_turn_partitions()
        return partitions.month_start(now, -MONTHS)
    finally:
        await store.close()


_SECONDARY = (
    "ix_turns_session_version", "ix_turns_history", "ix_turns_source", "ix_turns_input",
    "ix_turns_words", "ix_turns_created_at", "uq_turns_id",
)


async def _yield_priority(connection: asyncpg.Connection) -> None:
    """When this benchmark runs niced (``make bench-capacity`` runs it under ``nice``), the
    backend doing the fill gets the same priority and builds indexes without parallel workers
    (which would run at the server's): an hour-long fill then leaves the host's other work its
    share. Only for a server on this host, and only where this process may renice it."""
    niceness = os.getpriority(os.PRIO_PROCESS, 0)
    if niceness <= 0:
        return
    pid = await connection.fetchval("SELECT pg_backend_pid()")
    try:
        os.setpriority(os.PRIO_PROCESS, pid, niceness)
    except OSError:  # another host's server, or not ours to renice
        return
    await connection.execute("SET max_parallel_maintenance_workers = 0")


async def _fill(url: str, turns: int, sessions: int) -> dict[str, float]:
    """Fill the turn log (and one session row per conversation); time and disk."""
    start = await _layout(url)
    per = max(1, turns // sessions)
    connection = await asyncpg.connect(url)
    try:
        await _yield_priority(connection)
        await connection.execute("SET maintenance_work_mem = '512MB'")
        definitions = {r["indexname"]: r["indexdef"] for r in await connection.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'turns'"
            " AND indexname = ANY($1::text[])", list(_SECONDARY))}
        for name in definitions:
            await connection.execute(f"DROP INDEX {name}")
        began = time.perf_counter()
        for first in range(1, turns + 1, BATCH):
            await connection.execute(_fill_sql(first, min(turns, first + BATCH - 1), sessions,
                                               per, start))
            print(f"  filled {min(turns, first + BATCH - 1):,} turns"
                  f" ({time.perf_counter() - began:.0f} s)", file=sys.stderr)
        await connection.execute(f"""
            INSERT INTO sessions (id, version, state, created_at, updated_at, turns_since)
            SELECT 'conv-' || s, {per}, jsonb_build_object('id', 'conv-' || s, 'v', 4,
                   'data', jsonb_build_object('name', 'Cliente ' || (s + 1)), 'runs', '[]'::jsonb),
                   TIMESTAMPTZ '{start.isoformat()}', now(), TIMESTAMPTZ '{start.isoformat()}'
            FROM generate_series(0, {sessions - 1}) AS s""")
        filled = time.perf_counter() - began
        for name, definition in definitions.items():  # on every partition, not ON ONLY
            await connection.execute(definition.replace(" ON ONLY ", " ON "))
            print(f"  built {name} ({time.perf_counter() - began:.0f} s)", file=sys.stderr)
        indexed = time.perf_counter() - began - filled
        await connection.execute("VACUUM ANALYZE turns")
        await connection.execute("VACUUM ANALYZE sessions")
        print(f"  vacuumed ({time.perf_counter() - began:.0f} s)", file=sys.stderr)
        size = await connection.fetchval("SELECT pg_database_size(current_database())")
    finally:
        await connection.close()
    return {"fill_s": filled, "index_s": indexed, "disk_gb": size / 1e9,
            "turns_per_s": turns / filled}


async def _backend(store: Store) -> int:
    async with store.engine.connect() as connection:
        from sqlalchemy import text

        return int((await connection.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def _timed(calls: int, one: Callable[[int], Awaitable[Any]]) -> list[float]:
    out = []
    for i in range(calls):
        began = time.perf_counter()
        await one(i)
        out.append((time.perf_counter() - began) * 1000)
    return out


@dataclass
class Side:
    """One database under measurement: its pools, each conversation's last version, who was
    erased, and every round's figures (figure -> one value per round)."""

    url: str
    sessions: int
    per: int
    store: Store
    reader: Reader
    versions: dict[str, int]
    erased: set[int] = field(default_factory=set)
    samples: dict[str, list[float]] = field(default_factory=dict)

    def put(self, name: str, value: float) -> None:
        self.samples.setdefault(name, []).append(value)


async def _open(url: str, sessions: int, per: int) -> Side:
    store = await Store.connect(url, pool_size=1, max_overflow=0)
    side = Side(url, sessions, per, store, Reader(url, pool_size=1),
                {f"conv-{s}": per for s in range(sessions)})
    for warm in range(20):  # prepared statements, caches
        await store.load(f"conv-{warm}")
    return side


async def _saves(side: Side, label: str, calls: int, offset: int, seed: int) -> None:
    pid = await _backend(side.store)
    chosen = random.Random(seed).sample(range(side.sessions), min(calls, side.sessions))

    async def save(i: int) -> None:
        sid = f"conv-{chosen[i % len(chosen)]}"
        version = side.versions.get(sid, 0) + 1
        request = turn_request(sid, version, n=offset + i, partition=99)
        await side.store.save_turn(replace(request, turn=replace(request.turn, created_at=None,
                                                                 clock_at=None)))
        side.versions[sid] = version

    cpu = own_cpu_seconds(pid) * 1000
    wall = await _timed(len(chosen), save)
    cpu = (own_cpu_seconds(pid) * 1000 - cpu) / len(chosen)
    side.put(f"save p50 ms ({label})", percentile(wall, 0.5))
    side.put(f"save p99 ms ({label})", percentile(wall, 0.99))
    side.put(f"save CPU ms ({label})", cpu)


async def _indexed_round(side: Side, calls: int, round_: int) -> None:
    """With the turn log's indexes as migrated: saves, loads, the inspector, erases."""
    await _saves(side, "word index", calls, 10**9 + round_ * calls, seed=11 + round_)
    rng = random.Random(7 + round_)
    sessions = side.sessions
    picks = [f"conv-{rng.randrange(sessions)}" for _ in range(calls)]
    loads = await _timed(calls, lambda i: side.store.load(picks[i], history_limit=20))
    side.put("history read p50 ms", percentile(loads, 0.5))
    names = [f"Cliente {rng.randrange(1, sessions + 1)}" for _ in range(max(10, calls // 10))]
    searches = await _timed(len(names), lambda i: side.reader.search(names[i], limit=20))
    side.put("inspector search p50 ms", percentile(searches, 0.5))
    pages = await _timed(calls, lambda i: side.reader.conversation(picks[i], turns=50))
    side.put("inspector page p50 ms", percentile(pages, 0.5))
    left = [s for s in range(sessions) if s not in side.erased]
    gone = rng.sample(left, min(max(1, calls // 10), len(left)))  # a tenth, each round
    erases = await _timed(len(gone), lambda i: side.store.erase(session_id=f"conv-{gone[i]}"))
    side.put("erase p50 ms", percentile(erases, 0.5))
    side.erased.update(gone)
    side.versions.update({f"conv-{g}": 0 for g in gone})  # a later turn starts them again


async def _plans(side: Side) -> list[str]:
    """What PostgreSQL does for one name's search of turns and of conversations."""
    name = f"Cliente {side.sessions // 2}"
    out = []
    connection = await asyncpg.connect(side.url, server_settings={"jit": "off"})  # as Reader
    try:
        for label, sql, args in (
            ("turns", f"SELECT id FROM turns WHERE {TURN_WORDS} @@ plainto_tsquery('simple', $1)"
                      f" AND {TURN_TEXT} ILIKE $2 ORDER BY created_at DESC, id DESC LIMIT 20",
             (name, like_pattern(name))),
            ("sessions", f"SELECT id FROM sessions WHERE {SESSION_TEXT} ILIKE $1"
                         " ORDER BY updated_at DESC, id DESC LIMIT 20", (like_pattern(name),)),
        ):
            rows = await connection.fetch(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", *args)
            out += [f"-- the search of {label} for {name!r}"] + [r[0] for r in rows]
    finally:
        await connection.close()
    return out


async def _unindexed_round(side: Side, calls: int, round_: int) -> None:
    await _saves(side, "no search index", calls, 2 * 10**9 + round_ * calls, seed=23 + round_)


async def _finish(side: Side, calls: int, *, json_trigrams: bool, drop: bool) -> None:
    """Once, at the end (each changes the database for good): the saves with the whole-JSON
    trigram index, then the oldest month dropped."""
    if json_trigrams:
        began = time.perf_counter()
        await _sql(side.url, _JSON_TRIGRAMS)
        side.put("build whole-JSON trigram index s", time.perf_counter() - began)
        await _saves(side, "whole-JSON trigrams", calls, 3 * 10**9, seed=31)
    if drop:
        months = [p for p in await partitions.partitions(side.store.engine)
                  if p.start is not None and not p.default]
        oldest = min(months, key=lambda p: p.start or datetime.max.replace(tzinfo=UTC))
        rows = await _fetchval(side.url, f"SELECT count(*) FROM {oldest.name}")
        began = time.perf_counter()
        await _sql(side.url, f"DROP TABLE {oldest.name}")
        side.put(f"drop a month ({rows:,} turns) ms", (time.perf_counter() - began) * 1000)


async def _measure(empty: Side, full: Side, calls: int, rounds: int, *,
                   json_trigrams: bool) -> list[str]:
    """Both databases, round by round, one after the other within each round, so that a
    change in the host's load falls on both; the plans of the search on the filled one."""
    for round_ in range(rounds):
        for side in (empty, full):
            await _indexed_round(side, calls, round_)
        print(f"  round {round_ + 1} of {rounds} with the word index", file=sys.stderr)
    plans = await _plans(full)
    for side in (empty, full):
        await _sql(side.url, "DROP INDEX ix_turns_words")
    for round_ in range(rounds):
        for side in (empty, full):
            await _unindexed_round(side, calls, round_)
    await _finish(empty, calls, json_trigrams=json_trigrams, drop=False)
    await _finish(full, calls, json_trigrams=json_trigrams, drop=True)
    return plans


async def _measured(empty_url: str, full_url: str, small: int, sessions: int, per: int,
                    calls: int, rounds: int, *, json_trigrams: bool
                    ) -> tuple[Side, Side, list[str]]:
    empty = await _open(empty_url, small, per)
    full = await _open(full_url, sessions, per)
    try:
        plans = await _measure(empty, full, calls, rounds, json_trigrams=json_trigrams)
    finally:
        for side in (empty, full):
            await side.reader.close()
            await side.store.close()
    return empty, full, plans


async def _sql(url: str, sql: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


async def _fetchval(url: str, sql: str) -> Any:
    connection = await asyncpg.connect(url)
    try:
        return await connection.fetchval(sql)
    finally:
        await connection.close()


def run(turns: int, sessions: int, calls: int, *, rounds: int = 3,
        json_trigrams: bool = True) -> dict[str, Any]:
    """The whole benchmark; returns the figures (also printed): per figure, the median over
    the rounds on each database, and the range of the rounds' ratios."""
    with ExitStack() as stack:
        empty = scratch_database(stack, prefix="turnflow-capacity")
        full = scratch_database(stack, prefix="turnflow-capacity")
        print(f"PostgreSQL from {full.where}; filling {turns:,} turns over {sessions:,}"
              " conversations", file=sys.stderr)
        fill = asyncio.run(_fill(full.url, turns, sessions))
        per = max(1, turns // sessions)
        # The near-empty log: only as many conversations (of the same length) as are measured.
        small = min(sessions, calls)
        asyncio.run(_fill(empty.url, small * per, small))
        at_empty, at_full, plans = asyncio.run(_measured(
            empty.url, full.url, small, sessions, per, calls, rounds,
            json_trigrams=json_trigrams))
    medians = {side: {name: statistics.median(v) for name, v in figures.samples.items()}
               for side, figures in (("empty", at_empty), ("filled", at_full))}
    spreads = {name: [f / e for f, e in zip(values, at_empty.samples[name], strict=True) if e]
               for name, values in at_full.samples.items() if name in at_empty.samples}
    report = {"turns": turns, "sessions": sessions, "calls": calls, "rounds": rounds,
              "fill": fill, "empty": medians["empty"], "filled": medians["filled"],
              "ratios": spreads, "plans": plans}
    print("\n".join(plans))
    print(f"\nfill: {turns:,} turns in {fill['fill_s']:.0f} s ({fill['turns_per_s']:,.0f}/s),"
          f" indexes built in {fill['index_s']:.0f} s, database {fill['disk_gb']:.2f} GB")
    print(f"medians of {rounds} round(s), the two databases one after the other in each round")
    print(f"\n| {'':38} | {small * per:,} turns | {turns:,} turns | ratio | rounds' ratios |")
    print("|---|---|---|---|---|")
    for name, value in medians["filled"].items():
        base = medians["empty"].get(name)
        ratio = f"{value / base:.2f}x" if base else ""
        shown = f"{base:.2f}" if base is not None else ""
        spread = spreads.get(name) or []
        ranged = f"{min(spread):.2f}-{max(spread):.2f}x" if len(spread) > 1 else ""
        print(f"| {name:38} | {shown} | {value:.2f} | {ratio} | {ranged} |")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=10_000_000)
    parser.add_argument("--sessions", type=int, default=None,
                        help="conversations (default: a tenth of --turns)")
    parser.add_argument("--calls", type=int, default=300, help="calls per measured operation")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of measurements, alternating the two databases")
    parser.add_argument("--no-json-trigrams", dest="json_trigrams", action="store_false",
                        help="skip the saves with the whole-JSON trigram index the search used "
                        "to have (building it on 10,000,000 turns takes about an hour)")
    args = parser.parse_args(argv)
    if (args.turns < 1 or args.calls < 1 or args.rounds < 1
            or (args.sessions is not None and args.sessions < 1)):
        parser.error("--turns, --sessions, --calls and --rounds must be at least 1")
    sessions = args.sessions or max(1, args.turns // 10)
    run(args.turns, sessions, args.calls, rounds=args.rounds, json_trigrams=args.json_trigrams)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
