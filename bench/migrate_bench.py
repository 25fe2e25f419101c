"""Migration benchmark: does `turnflow migrate` delay live turns on a large turn log?

A scratch database gets a turn log of `--turns` turns (`--turns-per-session` per
conversation), a session row per conversation, an outbox row per turn (published) and a
pending timer per conversation, written with COPY. Then, while `--sessions` conversations each
load and save a turn through `store.Store` (the consumer's own statements) `--rate` times a
second, `turnflow migrate` runs in a subprocess. Every turn's latency is measured from the time
it was due (a turn held up by a lock also holds up the ones behind it, and they count), and
its delay is that latency less the median latency of the turns in the seconds before the
migration started.

The scenarios, one after another on the same seeded database:

- `old DDL 0014+0016`: the index statements revisions 0014 and 0016 ran before they were made
  online-safe (CREATE INDEX inside the revision's transaction), for comparison;
- `0013 -> head`: this release's `turnflow migrate` from revision 0013 (the release of
  2026-12-03) to head. The turn log is seeded at head with the indexes of 0014 and 0016 dropped
  and the database stamped 0013: every index those revisions build is built again,
  CONCURRENTLY; the columns later revisions add are already there, so their steps are the
  catalog-only ones, each under its lock_timeout;
- `0018 -> head`: from the previous release's head (revision 0018) to head;
- `empty -> head`: every revision on an empty database (no traffic: there is no schema).

    python -m bench.migrate_bench [--turns 1000000] [--turns-per-session 100]
                                  [--sessions 20] [--rate 5] [--no-old]
    make bench-migrate ARGS="--turns 1000000"

Uses DATABASE_URL (a scratch database is created there and dropped), else an embedded
PostgreSQL started for the run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import asyncpg

from bench.harness import REPO
from bench.harness.databases import execute_sql, scratch_database
from bench.harness.percentiles import percentile
from bench.harness.saves import save_request
from store import SourceRecord, Store, migrate

TOPIC = "inbound.turns"
VERSIONS = REPO / "migrations" / "versions"
TURNFLOW = str(Path(sys.executable).with_name("turnflow"))
BOUND_S = 1.0  # the target: no turn delayed more than this beyond its usual latency


def _revision(name: str) -> ModuleType:
    """A revision module, for the index definitions it holds (not run through alembic)."""
    path = next(VERSIONS.glob(f"{name}_*.py"))
    spec = importlib.util.spec_from_file_location(f"_bench_revision_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _indexes_of_0014_and_0016() -> tuple[list[str], list[str]]:
    """(index names to drop for the rewind, the old-style DDL of 0014 and 0016)."""
    r14, r16 = _revision("0014"), _revision("0016")
    names = ["ix_sessions_updated", "ix_dead_lettered_sources_session"]
    names += [f"ix_turns_{kind}" for kind in r14.KINDS]
    names += list(r16.SEARCH)
    old = ["BEGIN", "CREATE INDEX IF NOT EXISTS ix_sessions_updated ON sessions (updated_at, id)"]
    old += [f"CREATE INDEX IF NOT EXISTS ix_turns_{kind} ON turns (session_id, created_at) "
            f"WHERE {predicate}" for kind, predicate in r14.KINDS.items()]
    old += ["CREATE INDEX IF NOT EXISTS ix_dead_lettered_sources_session "
            "ON dead_lettered_sources (session_id, created_at)", "COMMIT", "BEGIN",
            "DROP INDEX IF EXISTS ix_turns_fallback",
            f"CREATE INDEX ix_turns_fallback ON turns (session_id, created_at) "
            f"WHERE {r16.FALLBACK}", "CREATE EXTENSION IF NOT EXISTS pg_trgm"]
    old += [f"CREATE INDEX IF NOT EXISTS {name} ON {table} USING gin ({expression} gin_trgm_ops)"
            for name, (table, expression) in r16.SEARCH.items()]
    old.append("COMMIT")
    return names, old


async def _unpartition(url: str) -> None:
    """The turn log back to one table, as a release before the monthly partitions had it:
    revisions 0024 and 0023 undone by their own downgrades (with no traffic running). The
    sessions keep 0023's nullable `turns_since` (its rerun adds it only if missing), so the
    stream of turns, which runs this release's store, can save throughout."""
    await asyncio.to_thread(migrate.downgrade, url, "0022")
    await execute_sql(url, "ALTER TABLE sessions ADD COLUMN IF NOT EXISTS turns_since timestamptz")


async def rewind_to_0013(url: str) -> None:
    """Undo what 0014, 0016, 0019, 0023 and 0024 made that a rerun builds again; stamp 0013.
    (0020 to 0022 only add tables, which a rerun keeps.)"""
    if await asyncio.to_thread(migrate.current, url) not in ("0013", "0022"):
        await _unpartition(url)
    names, _ = _indexes_of_0014_and_0016()
    await execute_sql(url, "; ".join(
        [f"DROP INDEX IF EXISTS {name}" for name in [*names, "ix_turns_fallback_next"]]
        + ["DROP TABLE IF EXISTS schema_compatibility",
           "UPDATE alembic_version SET version_num = '0013'"]
    ))


async def rewind_to_0018(url: str) -> None:
    """The previous release's head: the turn log one table again, no compatibility record."""
    await _unpartition(url)
    await execute_sql(url, "DROP TABLE IF EXISTS schema_compatibility; "
                           "UPDATE alembic_version SET version_num = '0018'")


# ---------------------------------------------------------------------------------- seeding


def _session(i: int) -> str:
    return f"s{i:07d}"


async def seed(url: str, turns: int, per_session: int) -> float:
    """COPY the turn log, sessions, outbox rows and timers; ANALYZE. Returns seconds taken."""
    started = time.perf_counter()
    sessions = max(1, turns // per_session)
    base = datetime(2026, 11, 1, tzinfo=UTC)
    state = json.dumps({"v": 4, "data": {"name": "Ana"}, "runs": [], "claims": {},
                        "inputs": [], "metadata": {}})
    connection = await asyncpg.connect(url)
    try:
        await connection.copy_records_to_table(
            "sessions", columns=["id", "version", "state", "created_at", "updated_at"],
            records=[(_session(i), per_session, state.replace('"v"', f'"id": "{_session(i)}", "v"'),
                      base, base + timedelta(minutes=i)) for i in range(sessions)],
        )
        await connection.copy_records_to_table(
            "timers", columns=["session_id", "key", "at"],
            records=[(_session(i), f"r1@{_session(i)}:wait:1", base + timedelta(days=60))
                     for i in range(sessions)],
        )
        chunk = max(1, 50_000 // per_session)
        for first in range(0, sessions, chunk):
            rows = list(_turn_rows(range(first, min(sessions, first + chunk)), per_session, base))
            await connection.copy_records_to_table("turns", columns=_TURN_COLUMNS, records=rows)
            await connection.copy_records_to_table(
                "outbox", columns=["session_id", "topic", "key", "payload", "created_at",
                                   "published_at"],
                records=[(r[0], "outbound.messages", r[0], r[3], r[-1], r[-1]) for r in rows],
            )
        await connection.execute("VACUUM ANALYZE")
    finally:
        await connection.close()
    return time.perf_counter() - started


_TURN_COLUMNS = ["session_id", "version", "input", "messages", "outcomes", "llm_calls",
                 "source_topic", "source_partition", "source_offset", "input_id", "created_at"]
_OUTCOMES = {
    0: '[{"code": "billed", "detail": "not billed (fallback)"}]',
    1: '[{"code": "handoff", "run_id": null}]',
    2: '[{"code": "action-failed"}]',
    3: '[{"code": "gated"}]',
}
_ASKED = '[{"code": "asked", "run_id": "r1", "step_id": "ask_email", "status": "asking"}]'


def _turn_rows(sessions: range, per_session: int, base: datetime) -> Iterator[tuple[Any, ...]]:
    offset = sessions.start * per_session
    for i in sessions:
        sid = _session(i)
        for version in range(1, per_session + 1):
            offset += 1
            wamid = f"wamid.{i}.{version}"
            yield (
                sid, version,
                f'{{"session_id": "{sid}", "message": "quero marcar para {version}", '
                f'"id": "{wamid}"}}',
                f'[{{"kind": "ai", "text": "Claro, qual dia? ({version})", '
                f'"key": "{sid}:{version}:0", "session_id": "{sid}"}}]',
                _OUTCOMES.get(offset % 50, _ASKED), 1, TOPIC, i % 12, offset, wamid,
                base + timedelta(seconds=offset),
            )


# ---------------------------------------------------------------------------------- traffic


@dataclass
class Turn:
    due: float
    latency: float


@dataclass
class Traffic:
    """Conversations taking turns at a steady rate through the store; every turn timed."""

    store: Store
    sessions: list[str]
    rate: float
    turns: list[Turn] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def _conversation(self, session_id: str, phase: float) -> None:
        loaded = await self.store.load(session_id)
        version = loaded.version
        period = 1.0 / self.rate
        due = time.perf_counter() + phase * period
        while not self._stop.is_set():
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            offset = 10**12 + uuid.uuid4().int % 10**11
            try:
                await self.store.load(session_id, source=SourceRecord(TOPIC, 0, offset),
                                      input_id=f"wamid.{offset}")
                saved = await self.store.save_turn(save_request(session_id, version, TOPIC, offset))
                version = saved.version
            except Exception as exc:  # a failed turn is reported, and the next one goes on
                self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
                version = await self._version(session_id)
            self.turns.append(Turn(due, time.perf_counter() - due))
            due += period

    async def _version(self, session_id: str) -> int:
        """The session's version after a failed turn, asked again until the store answers."""
        while True:
            try:
                return (await self.store.load(session_id)).version
            except Exception as exc:  # the same stall: counted, then asked again
                self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
                await asyncio.sleep(0.1)

    async def run_while(self, work: Callable[[], Awaitable[float]], before: float,
                        after: float) -> tuple[float, float, float]:
        """Turns for `before` s, then during `work()`, then `after` s. Returns (work's start,
        work's end, work's own figure) on the perf_counter clock."""
        tasks = [asyncio.create_task(self._conversation(s, i / len(self.sessions)))
                 for i, s in enumerate(self.sessions)]
        try:
            await asyncio.sleep(before)
            start = time.perf_counter()
            figure = await work()
            end = time.perf_counter()
            await asyncio.sleep(after)
        finally:
            self._stop.set()
            await asyncio.gather(*tasks)
        return start, end, figure


@dataclass
class Result:
    scenario: str
    migrate_s: float
    baseline_p50_ms: float
    turns_during: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    max_delay_ms: float
    errors: int

    def line(self, million: float) -> str:
        per_million = self.migrate_s / million if million else 0.0
        return (f"{self.scenario:<20} migrate {self.migrate_s:7.2f} s ({per_million:6.2f} s per "
                f"million turns)  usual {self.baseline_p50_ms:6.1f} ms  during: {self.turns_during}"
                f" turns p50 {self.p50_ms:6.1f} p99 {self.p99_ms:7.1f} max {self.max_ms:7.1f} ms"
                f"  max delay {self.max_delay_ms:7.1f} ms  errors {self.errors}")


def _summary(scenario: str, traffic: Traffic, start: float, end: float) -> Result:
    baseline = [t.latency for t in traffic.turns if t.due < start]
    during = [t.latency for t in traffic.turns if start <= t.due <= end]
    usual = statistics.median(baseline) if baseline else 0.0
    ordered = sorted(during) or [0.0]
    return Result(
        scenario=scenario, migrate_s=end - start, baseline_p50_ms=usual * 1000,
        turns_during=len(during), p50_ms=percentile(ordered, 0.5) * 1000,
        p99_ms=percentile(ordered, 0.99) * 1000,
        max_ms=ordered[-1] * 1000, max_delay_ms=(ordered[-1] - usual) * 1000,
        errors=len(traffic.errors),
    )


async def _subprocess(*args: str, env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _out, err = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{args[1:]} exited {process.returncode}: {err.decode().strip()}")
    return time.perf_counter() - started


async def turnflow_migrate(url: str) -> float:
    """This release's `turnflow migrate` in a subprocess; seconds it took."""
    import os

    return await _subprocess(TURNFLOW, "migrate", env={**os.environ, "DATABASE_URL": url})


async def old_ddl(url: str) -> float:
    """The statements 0014 and 0016 ran before: CREATE INDEX inside a transaction."""
    _, statements = _indexes_of_0014_and_0016()
    script = ("import asyncio, asyncpg, sys\n"
              "async def main():\n"
              "    c = await asyncpg.connect(sys.argv[1])\n"
              f"    for s in {statements!r}:\n"
              "        await c.execute(s)\n"
              "    await c.close()\n"
              "asyncio.run(main())\n")
    return await _subprocess(sys.executable, "-c", script, url)


async def scenario(name: str, url: str, work: Callable[[], Awaitable[float]], *,
                   sessions: int, rate: float, before: float = 3.0,
                   after: float = 1.0) -> Result:
    store = await Store.connect(url, pool_size=sessions, max_overflow=sessions)
    try:
        traffic = Traffic(store, [_session(i) for i in range(sessions)], rate)
        start, end, _ = await traffic.run_while(work, before, after)
    finally:
        await store.close()
    result = _summary(name, traffic, start, end)
    if traffic.errors:
        print(f"  {name}: {len(traffic.errors)} failed turns, first: {traffic.errors[0]}")
    return result


async def run_all(url: str, empty_url: str, *, turns: int, per_session: int, sessions: int,
                  rate: float, old: bool, report: bool = False
                  ) -> tuple[float, list[Result]]:
    await rewind_to_0013(url)  # seeded without the search indexes, as a 2026-12-03 database
    seeded = await seed(url, turns, per_session)
    if report:
        print(f"seeded in {seeded:.1f} s (COPY, then VACUUM ANALYZE)", flush=True)
    results = []

    async def add(result: Result) -> None:
        results.append(result)
        if report:
            million = turns / 1e6 if result.turns_during else 0.0
            print(result.line(million), flush=True)

    if old:
        await add(await scenario("old DDL 0014+0016", url, lambda: old_ddl(url),
                                 sessions=sessions, rate=rate))
        await rewind_to_0013(url)
    await add(await scenario("0013 -> head", url, lambda: turnflow_migrate(url),
                             sessions=sessions, rate=rate))
    assert await asyncio.to_thread(migrate.current, url) == migrate.head()
    await rewind_to_0018(url)
    await add(await scenario("0018 -> head", url, lambda: turnflow_migrate(url),
                             sessions=sessions, rate=rate))
    started = time.perf_counter()
    await turnflow_migrate(empty_url)
    await add(Result("empty -> head", time.perf_counter() - started, 0, 0, 0, 0, 0, 0, 0))
    return seeded, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1_000_000)
    parser.add_argument("--turns-per-session", type=int, default=100)
    parser.add_argument("--sessions", type=int, default=20, help="conversations taking turns")
    parser.add_argument("--rate", type=float, default=5.0, help="turns/s per conversation")
    parser.add_argument("--no-old", action="store_true", help="skip the old-style DDL run")
    args = parser.parse_args()
    with ExitStack() as stack:
        database = scratch_database(stack, prefix="turnflow-migrate-bench")
        empty = scratch_database(stack, prefix="turnflow-migrate-empty")
        asyncio.run(_drop_everything(empty.url))
        print(f"PostgreSQL from {database.where}; {args.turns:,} turns, "
              f"{args.turns // args.turns_per_session:,} conversations; traffic "
              f"{args.sessions} conversations x {args.rate:g} turns/s", flush=True)
        _seeded, results = asyncio.run(run_all(
            database.url, empty.url, turns=args.turns, per_session=args.turns_per_session,
            sessions=args.sessions, rate=args.rate, old=not args.no_old, report=True))
        worst = max(r.max_delay_ms for r in results if r.scenario.endswith("head")
                    and r.turns_during)
        print(f"this release's migrate: worst delay {worst:.0f} ms "
              f"({'within' if worst <= BOUND_S * 1000 else 'OVER'} the {BOUND_S:g} s bound)")


async def _drop_everything(url: str) -> None:
    await execute_sql(url, "DROP SCHEMA public CASCADE; CREATE SCHEMA public")


if __name__ == "__main__":
    main()
