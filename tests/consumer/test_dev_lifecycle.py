"""``turnflow dev`` as a child process: what a stop signal leaves behind, what the chat says
when its input is dead-lettered, the metrics port it picks, and recording after recording into
one database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from consumer.embedded_broker import free_port
from store import EmbeddedPostgres
from tests.consumer.dev_process import REPO, clean_env, run_dev

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by the server's own user
        return True
    return True


def _read_until(process: subprocess.Popen[str], needle: str, within: float) -> str:
    """The child's stdout up to the first line holding ``needle``."""
    assert process.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return "".join(seen)
    raise AssertionError(f"{needle!r} not printed; stdout so far:\n{''.join(seen)}")


def test_sigterm_stops_the_embedded_postgres(tmp_path: Path) -> None:
    """A chat stopped with SIGTERM (a process manager, ``kill``) stops what it started, its
    embedded PostgreSQL included, and exits 0 as Ctrl-C does."""
    script = tmp_path / "long.chat"
    script.write_text("hi\n/wait 300\n")
    env = {**clean_env(), "METRICS_PORT": "0"}
    process = subprocess.Popen(
        [sys.executable, "-m", "consumer.cli", "dev", "--script", str(script),
         "--data-dir", str(tmp_path)],
        cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )
    try:
        _read_until(process, "[waiting 300s]", within=180)
        pid_file = tmp_path / "postgres" / "postmaster.pid"
        postgres_pid = int(pid_file.read_text().splitlines()[0])
        assert _alive(postgres_pid)
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=90)
        stderr = process.stderr.read() if process.stderr else ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
            EmbeddedPostgres(tmp_path / "postgres").stop()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    deadline = time.monotonic() + 30
    while _alive(postgres_pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    left_running = _alive(postgres_pid)
    if left_running:  # not left behind by the test either
        EmbeddedPostgres(tmp_path / "postgres").stop()
    assert not left_running, "the embedded PostgreSQL outlived the chat"
    assert code == 0, stderr
    assert "turnflow dev: stopped (SIGTERM)." in stderr
    assert not pid_file.exists()


DOWN_AGENT = textwrap.dedent("""
    from examples.demo_agent import build_agent


    class Broken:  # every turn fails with a bug: retried, then dead-lettered

        def __init__(self, inner):
            self.inner, self.name, self.config = inner, inner.name, inner.config

        async def turn(self, request):
            raise RuntimeError("the agent is broken")


    agent = Broken(build_agent())
""")


def test_a_dead_lettered_input_is_reported_at_once(tmp_path: Path) -> None:
    """An input the consumer gives up on goes to the DLQ (a turn failing with a bug, retried
    MAX_RETRIES times: a model that is only down is waited out, then answered with the fallback
    message); the chat reads the DLQ and says so at once instead of waiting out the turn
    timeout and blaming a missing turn."""
    (tmp_path / "down_agent.py").write_text(DOWN_AGENT)
    script = tmp_path / "one.chat"
    script.write_text("hi\n")
    run = run_dev("--agent", "down_agent:agent", "--script", str(script),
                  "--data-dir", str(tmp_path), cwd=tmp_path,
                  env={"MAX_RETRIES": "1", "RETRY_BACKOFF_MS": "10"}, timeout=200)
    assert run.code == 1, run.stdout + run.stderr
    said = run.stdout
    assert "was sent to the dead-letter topic (" in said, said
    assert "no turn will run for it" in said
    assert "no turn ran for this input within" not in said, said


def test_the_metrics_port_is_picked_when_unset(tmp_path: Path) -> None:
    """With the default metrics port taken (a node exporter, another turnflow), the chat picks a
    free port on 127.0.0.1 itself and prints it, unless METRICS_PORT is set."""
    script = tmp_path / "one.chat"
    script.write_text("hi\n")
    env = {k: v for k, v in clean_env().items() if k not in ("METRICS_PORT", "METRICS_HOST")}
    import socket

    with socket.socket() as holder:  # the default port of `turnflow consume`, taken
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            holder.bind(("0.0.0.0", 9100))
            holder.listen()
        except OSError:
            pass  # already taken by something else: the same situation
        completed = subprocess.run(
            [sys.executable, "-m", "consumer.cli", "dev", "--script", str(script),
             "--data-dir", str(tmp_path)],
            cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=240, check=False,
        )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    metrics = [line for line in completed.stdout.splitlines() if line.startswith("  metrics")]
    assert len(metrics) == 1, completed.stdout
    assert metrics[0].startswith("  metrics   http://127.0.0.1:")
    assert ":9100/" not in metrics[0]


def test_recordings_one_after_another_into_one_database(
    tmp_path: Path, database_url: str
) -> None:
    """Two chats recorded into the same DATABASE_URL with the embedded broker: the second is
    not refused, and both conversations are in the turn log."""
    import asyncio

    script = tmp_path / "two.chat"
    script.write_text("hi\nmy name is Sam\n")
    env = {"DATABASE_URL": database_url}
    sessions = [f"walk-{os.getpid()}-{n}-{free_port()}" for n in (1, 2)]
    for session in sessions:
        run = run_dev("--script", str(script), "--session", session, "--data-dir",
                      str(tmp_path), env=env)
        assert run.code == 0, run.stdout + run.stderr

    async def turns_of(session: str) -> int:
        import asyncpg

        connection = await asyncpg.connect(database_url, timeout=10)
        try:
            count = await connection.fetchval(
                "SELECT count(*) FROM turns WHERE session_id = $1", session)
        finally:
            await connection.close()
        return int(count)

    for session in sessions:
        assert asyncio.run(turns_of(session)) >= 2
