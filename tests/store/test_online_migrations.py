"""The migrations run beside live traffic: indexes built CONCURRENTLY (an INVALID one left by
an interrupted build is rebuilt), and DDL that needs a hot table's lock gives the lock up
quickly and retries instead of queueing every turn behind a long transaction."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

import asyncpg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer import cli
from migrations import online
from store import migrate
from tests.store.migration_dbs import off_loop, rows, scratch_url

__all__ = ["scratch_url"]


def test_an_invalid_index_left_by_an_interrupted_build_is_rebuilt(scratch_url: str) -> None:
    """A CONCURRENTLY build of `ix_turns_handoff` that failed half-way (here: its predicate
    divides by zero on one row) leaves an INVALID index under that name; revision 0014 finds
    it by pg_index.indisvalid, drops it and builds its own, valid, with its own predicate."""
    off_loop(migrate.upgrade, scratch_url, "0013")
    rows(scratch_url, """INSERT INTO turns (session_id, version, input, llm_calls)
                         VALUES ('s-1', 1, '{"message": "hi"}', 7), ('s-2', 1, '{}', 1)""")
    with pytest.raises(asyncpg.DivisionByZeroError):
        async def build() -> None:
            connection = await asyncpg.connect(scratch_url)
            try:
                await connection.execute(
                    "CREATE INDEX CONCURRENTLY ix_turns_handoff ON turns (session_id)"
                    " WHERE 1 / (llm_calls - 7) > 0"
                )
            finally:
                await connection.close()

        off_loop(asyncio.run, build())
    valid = "SELECT i.indisvalid, pg_get_indexdef(i.indexrelid) FROM pg_index i" \
            " JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = 'ix_turns_handoff'"
    assert rows(scratch_url, valid)[0][0] is False

    off_loop(migrate.upgrade, scratch_url, "0014")
    [(is_valid, definition)] = rows(scratch_url, valid)
    assert is_valid is True
    assert "handoff" in definition and "llm_calls" not in definition
    # Every index of the migrated schema is valid.
    off_loop(migrate.upgrade, scratch_url)
    assert rows(scratch_url, "SELECT count(*) FROM pg_index WHERE NOT indisvalid") == [(0,)]


def _hold_lock(url: str, table: str, seconds: float, held: threading.Event,
               release: threading.Event | None = None) -> threading.Thread:
    """A transaction reading `table` (ACCESS SHARE) for `seconds`, or until `release` is set:
    a long report, say."""
    async def hold() -> None:
        connection = await asyncpg.connect(url)
        try:
            async with connection.transaction():
                await connection.execute(f"LOCK TABLE {table} IN ACCESS SHARE MODE")
                held.set()
                if release is None:
                    await asyncio.sleep(seconds)
                else:
                    await asyncio.to_thread(release.wait, seconds)
        finally:
            await connection.close()

    thread = threading.Thread(target=asyncio.run, args=(hold(),), daemon=True)
    thread.start()
    assert held.wait(10)
    return thread


def _reads_while(url: str, table: str, until: threading.Event) -> list[float]:
    """Each read of `table`'s rows, timed, one after another until `until` is set."""
    async def read() -> list[float]:
        connection = await asyncpg.connect(url)
        took: list[float] = []
        try:
            while not until.is_set():
                started = time.monotonic()
                await connection.fetch(f"SELECT * FROM {table} LIMIT 1")
                took.append(time.monotonic() - started)
                await asyncio.sleep(0.02)
        finally:
            await connection.close()
        return took

    return off_loop(asyncio.run, read())


def test_ddl_behind_a_long_transaction_retries_and_reads_go_on(
    scratch_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0018 adds columns to outbox, timers and turns. A transaction holds outbox for 2.5 s:
    the migration asks for the lock for 100 ms at a time and steps back between tries, so the
    reads of outbox queued behind its request wait at most about that long, never the 2.5 s;
    once the transaction ends the migration goes through."""
    off_loop(migrate.upgrade, scratch_url, "0017")
    monkeypatch.setenv("TURNFLOW_MIGRATE_LOCK_TIMEOUT_MS", "100")
    held = threading.Event()
    blocker = _hold_lock(scratch_url, "outbox", 2.5, held)
    done = threading.Event()
    migrated: list[float] = []

    def run() -> None:
        started = time.monotonic()
        try:
            migrate.upgrade(scratch_url, "0018")
        finally:
            migrated.append(time.monotonic() - started)
            done.set()

    migration = threading.Thread(target=run, daemon=True)
    migration.start()
    took = _reads_while(scratch_url, "outbox", done)
    migration.join(30)
    blocker.join(10)
    assert migrated and migrated[0] >= 2.0, migrated  # it waited for the transaction
    assert off_loop(migrate.current, scratch_url) == "0018"
    assert len(took) > 10, took
    assert max(took) < 0.6, max(took)  # never queued behind the 2.5 s transaction


def test_a_lock_never_granted_fails_in_one_line_and_migrate_runs_again(
    scratch_url: str
) -> None:
    """With the lock held through all its tries, `turnflow migrate` exits 1 with one line
    naming the table's step and stamps nothing; run again once the lock is free, it finishes."""
    off_loop(migrate.upgrade, scratch_url, "0017")
    held, release = threading.Event(), threading.Event()
    blocker = _hold_lock(scratch_url, "outbox", 120.0, held, release)
    env = {"DATABASE_URL": scratch_url, "TURNFLOW_MIGRATE_LOCK_TIMEOUT_MS": "50",
           "TURNFLOW_MIGRATE_LOCK_ATTEMPTS": "3", "PATH": "/usr/bin:/bin"}
    failed = subprocess.run([sys.executable, "-m", "consumer.cli", "migrate"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1, failed
    assert failed.stderr.count("\n") == 1, failed.stderr
    assert "outbox trace columns: lock not granted in 3 tries" in failed.stderr
    assert off_loop(migrate.current, scratch_url) == "0017"
    release.set()
    blocker.join(10)
    again = subprocess.run([sys.executable, "-m", "consumer.cli", "migrate"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again
    assert off_loop(migrate.current, scratch_url) == migrate.head()


@given(timeout=st.one_of(st.text(max_size=12), st.integers(-10, 10**11).map(str))
       .filter(lambda t: "\x00" not in t),
       attempts=st.one_of(st.just(""), st.integers(-5, 50).map(str)))
def test_the_lock_settings_are_used_or_refused_in_one_line(timeout: str, attempts: str) -> None:
    """Whatever TURNFLOW_MIGRATE_LOCK_TIMEOUT_MS and _ATTEMPTS hold, they are either positive
    integers (or unset: the defaults) and used, or refused with one line naming the variable;
    `turnflow migrate` refuses them with exit 2 before touching the database."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TURNFLOW_MIGRATE_LOCK_TIMEOUT_MS", timeout)
        patch.setenv("TURNFLOW_MIGRATE_LOCK_ATTEMPTS", attempts)
        patch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
        problem = migrate.settings_problem()
        valid = all(
            v.strip() == "" or (v.strip().isascii() and v.strip().isdigit()
                                and len(v.strip()) <= 9 and 0 < int(v) <= most)
            for v, most in ((timeout, 60_000), (attempts, 1_000))
        )
        if valid:
            assert problem is None
            assert online.lock_timeout_ms() > 0 and online.lock_attempts() > 0
        else:
            assert problem is not None and "\n" not in problem
            assert "TURNFLOW_MIGRATE_LOCK_" in problem
            assert cli.main(["migrate"]) == 2
