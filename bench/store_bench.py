"""Store benchmark: full save transactions per second beside pgbench's single-row update.

For each concurrency level, N workers each own one session and save turns back to back for a
fixed time through `Store.save_turn` (session update + turn-log row + two outbox rows, the
shape a reply with a timer writes). Then pgbench, on the same server in the same run, updates
one row per transaction of a sessions-like table with the same number of clients — the floor
any save must pay. The ratio says what the turn log, the outbox and the Python client cost on
top of that floor. Last, the same workers save through the consumer's `SaveGroup`, which puts
the saves in flight at the same time into one statement (a group commit).

    python bench/store_bench.py [--seconds 5] [--levels 1,8,32]

Uses DATABASE_URL (a scratch database is created there and dropped), else an embedded
PostgreSQL started for the run. Load goes to that server only and stops after the set time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import asyncpg
from sqlalchemy import event, text
from sqlalchemy.engine import make_url

from store import OutboxEntry, SaveRequest, SourceRecord, Store, TurnRecord, direct, jsoncodec
from store.scratch import execute_sql, scratch_database

STATE = {
    "id": "",
    "v": 4,
    "data": {f"field_{i}": f"value {i} " * 4 for i in range(20)},
    "runs": [{"id": "r1", "flow_id": "checkout", "status": "asking", "step_id": "ask_email",
              "visit": 3, "input": {}, "asked": {"email": 1},
              "started_at": "2026-11-30T06:00:00Z"}],
    "claims": {"email": "r1"},
    "inputs": [f"wamid.{i}" for i in range(50)],
    "metadata": {},
    "last_user_at": "2026-11-30T06:00:00Z",
    "last_assistant_at": "2026-11-30T06:00:01Z",
}

# One row per client, and the same state document the saves write, so the update moves as
# many bytes of session state as a save does.
PGBENCH_SCRIPT = """\\set id :client_id + 1
UPDATE bench_sessions AS s SET version = s.version + 1, state = t.state, updated_at = now()
FROM bench_state AS t WHERE s.id = :id;
"""


def _request(session_id: str, version: int, topic: str, offset: int) -> SaveRequest:
    reply = {"kind": "ai", "text": "Qual é o seu e-mail?", "key": f"{session_id}:{version}:0",
             "after_ms": 0, "run_id": "r1", "step_id": "ask_email"}
    timer = {"key": f"{session_id}:remind", "at": "2026-11-30T07:00:00Z", "replaces": None}
    return SaveRequest(
        session_id=session_id,
        expected_version=version,
        state={**STATE, "id": session_id},
        turn=TurnRecord(
            input={"session_id": session_id, "message": "oi", "id": f"wamid.{offset}"},
            messages=[reply],
            schedule=[timer],
            outcomes=[{"code": "asked", "run_id": "r1", "flow_id": "checkout",
                       "step_id": "ask_email", "status": "asking", "detail": None,
                       "llm_calls": 1}],
            llm_calls=2,
            source=SourceRecord(topic=topic, partition=0, offset=offset),
        ),
        outbox=[
            OutboxEntry("outbound.messages", session_id, {**reply, "session_id": session_id}),
            OutboxEntry("outbound.schedule", session_id, {**timer, "session_id": session_id}),
        ],
    )


async def _saves_per_second(
    url: str, clients: int, seconds: float, *, grouped: bool = False
) -> tuple[float, float, float]:
    """Run `clients` savers for `seconds`; return (saves/s, statements/save, client CPU ms/save).
    With `grouped`, the savers go through the consumer's `SaveGroup` (saves in flight at the
    same time share one statement) instead of calling `Store.save_turn` each."""
    from consumer.groups import SaveGroup

    store = await Store.connect(url, pool_size=clients, max_overflow=0)
    group = SaveGroup(store)
    save = group.save if grouped else store.save_turn
    statements = 0

    def count(*_: object) -> None:
        nonlocal statements
        statements += 1

    event.listen(store._engine.sync_engine, "before_cursor_execute", count)
    direct.statement_listeners.append(count)
    run = uuid.uuid4().hex[:8]
    offsets = iter(range(10**12))
    saves = 0
    deadline = 0.0

    async def saver(n: int) -> None:
        nonlocal saves
        session_id = f"bench-{run}-{n}"
        topic = f"inbound.turns.{run}"
        version = 0
        while time.perf_counter() < deadline:
            await save(_request(session_id, version, topic, next(offsets)))
            version += 1
            saves += 1

    runs = [run]
    try:
        deadline = time.perf_counter() + 0.5  # warm the pool and prepared statements
        await asyncio.gather(*(saver(n) for n in range(clients)))
        run = uuid.uuid4().hex[:8]
        runs.append(run)
        saves = statements = 0
        started, cpu_started = time.perf_counter(), time.process_time()
        deadline = started + seconds
        await asyncio.gather(*(saver(n) for n in range(clients)))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    finally:
        # The cleanup's statements are not saves: stop counting first.
        direct.statement_listeners.remove(count)
        event.remove(store._engine.sync_engine, "before_cursor_execute", count)
        try:
            await _forget(store, runs)
        finally:
            await store.close()
    return saves / elapsed, statements / max(saves, 1), cpu * 1000 / max(saves, 1)


async def _forget(store: Store, runs: list[str]) -> None:
    """Delete what the savers wrote. Their outbox rows are never published: left behind in a
    database a consumer later uses (the end-to-end benchmark's), its relay would spend its
    first seconds sending tens of thousands of them."""
    async with store.engine.connect() as connection:
        for run in runs:
            pattern = {"pattern": f"bench-{run}-%"}
            for table in ("outbox", "turns", "sessions"):
                column = "id" if table == "sessions" else "session_id"
                await connection.execute(
                    text(f"DELETE FROM {table} WHERE {column} LIKE :pattern"), pattern
                )


def _pgbench_tps(url: str, clients: int, seconds: float, script: Path) -> float:
    parsed = make_url(url)
    command = [
        shutil.which("pgbench") or "pgbench", "-n", "-M", "prepared", "-f", str(script),
        "-c", str(clients), "-j", str(min(clients, os.cpu_count() or 1)),
        "-T", str(max(1, round(seconds))),
        "-h", parsed.host or "127.0.0.1", "-p", str(parsed.port or 5432),
        "-U", parsed.username or "postgres", str(parsed.database),
    ]
    env = {**os.environ, "PGPASSWORD": parsed.password or ""}
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env,
                         timeout=seconds + 60).stdout
    match = re.search(r"tps = ([\d.]+)", out)
    if match is None:
        raise RuntimeError(f"no tps in pgbench output:\n{out}")
    return float(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per level and tool")
    parser.add_argument("--levels", default="1,8,32", help="concurrency levels")
    options = parser.parse_args()
    levels = [int(level) for level in options.levels.split(",")]

    with ExitStack() as stack:
        database = scratch_database(stack, prefix="turnflow-bench")
        url, where = database.url, database.where
        rows = max(levels)
        asyncio.run(execute_sql(url, (
            "CREATE TABLE bench_sessions (id int PRIMARY KEY, version bigint NOT NULL,"
            " state jsonb NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());"
            f" INSERT INTO bench_sessions SELECT g, 0, '{{}}' FROM generate_series(1, {rows}) g;"
            " CREATE TABLE bench_state (state jsonb NOT NULL);"
            f" INSERT INTO bench_state VALUES ('{jsoncodec.dumps(STATE)}')"
        )))
        script = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "update.sql"
        script.write_text(PGBENCH_SCRIPT)

        version = asyncio.run(_server_version(url))
        print(f"server: {where}, PostgreSQL {version}, {os.cpu_count()} CPUs, "
              f"{options.seconds:g}s per level")
        _, per_save, _ = asyncio.run(_saves_per_second(url, 1, 1.0))
        print(f"statements per save: {per_save:.2f} (autocommit: one round trip, one commit)")
        print(f"{'clients':>7} {'store saves/s':>14} {'pgbench tps':>12} {'ratio':>6}"
              f" {'client CPU ms/save':>19} {'grouped saves/s':>16} {'statements/save':>16}"
              f" {'CPU ms/save':>12}")
        for clients in levels:
            saves, _, cpu_ms = asyncio.run(_saves_per_second(url, clients, options.seconds))
            tps = _pgbench_tps(url, clients, options.seconds, script)
            grouped, per_group_save, group_cpu_ms = asyncio.run(
                _saves_per_second(url, clients, options.seconds, grouped=True)
            )
            print(f"{clients:>7} {saves:>14.0f} {tps:>12.0f} {saves / tps:>6.2f} {cpu_ms:>19.2f}"
                  f" {grouped:>16.0f} {per_group_save:>16.2f} {group_cpu_ms:>12.2f}")


async def _server_version(url: str) -> str:
    connection = await asyncpg.connect(url)
    try:
        return str(await connection.fetchval("SHOW server_version"))
    finally:
        await connection.close()


if __name__ == "__main__":
    main()
