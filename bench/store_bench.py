"""Store benchmark: full save transactions per second beside pgbench's single-row update.

For each concurrency level, N workers each own one session and save turns back to back for a
fixed time through `Store.save_turn` (session update + turn-log row + two outbox rows, the
shape a reply with a timer writes). Then pgbench, on the same server in the same run, updates
one row per transaction of a sessions-like table with the same number of clients — the floor
any save must pay. The ratio says what the turn log, the outbox and the Python client cost on
top of that floor. Last, the same workers save through the consumer's `SaveGroup`, which puts
the saves in flight at the same time into one statement (a group commit).

    python -m bench.store_bench [--seconds 5] [--levels 1,8,32]

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
from contextlib import ExitStack
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url

from bench.harness.databases import execute_sql, scratch_database
from bench.harness.saves import STATE, saves_per_second
from store import jsoncodec

# One row per client, and the same state document the saves write, so the update moves as
# many bytes of session state as a save does.
PGBENCH_SCRIPT = """\\set id :client_id + 1
UPDATE bench_sessions AS s SET version = s.version + 1, state = t.state, updated_at = now()
FROM bench_state AS t WHERE s.id = :id;
"""


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
        _, per_save, _ = asyncio.run(saves_per_second(url, 1, 1.0))
        print(f"statements per save: {per_save:.2f} (autocommit: one round trip, one commit)")
        print(f"{'clients':>7} {'store saves/s':>14} {'pgbench tps':>12} {'ratio':>6}"
              f" {'client CPU ms/save':>19} {'grouped saves/s':>16} {'statements/save':>16}"
              f" {'CPU ms/save':>12}")
        for clients in levels:
            saves, _, cpu_ms = asyncio.run(saves_per_second(url, clients, options.seconds))
            tps = _pgbench_tps(url, clients, options.seconds, script)
            grouped, per_group_save, group_cpu_ms = asyncio.run(
                saves_per_second(url, clients, options.seconds, grouped=True)
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
