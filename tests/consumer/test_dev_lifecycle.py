"""``turnflow dev`` as a child process: what a stop signal leaves behind, what the chat says
when its input is dead-lettered, and the metrics port it picks. (Recording after recording into
one database, and a burst sent from the chat: tests/integration/test_replay_walkthrough.py.)"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from consumer.settings import DEFAULT_METRICS_PORTS
from store import EmbeddedPostgres
from tests.consumer.dev_process import REPO, clean_env

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
    timeout and blaming a missing turn.

    The same run has the default metrics port taken (a node exporter, another turnflow): with
    METRICS_PORT unset the chat picks a free port on 127.0.0.1 itself and prints it."""
    (tmp_path / "down_agent.py").write_text(DOWN_AGENT)
    script = tmp_path / "one.chat"
    script.write_text("hi\n")
    env = {k: v for k, v in clean_env().items() if k not in ("METRICS_PORT", "METRICS_HOST")}
    with socket.socket() as holder:  # the default port of `turnflow consume`, taken
        try:
            holder.bind(("0.0.0.0", DEFAULT_METRICS_PORTS["consume"]))
            holder.listen()
        except OSError:
            pass  # already taken by something else: the same situation
        completed = subprocess.run(
            [sys.executable, "-m", "consumer.cli", "dev", "--agent", "down_agent:agent",
             "--script", str(script), "--data-dir", str(tmp_path)],
            cwd=tmp_path, env={**env, "MAX_RETRIES": "1", "RETRY_BACKOFF_MS": "10"},
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=200, check=False,
        )
    said = completed.stdout
    assert completed.returncode == 1, said + completed.stderr
    assert "was sent to the dead-letter topic (" in said, said
    assert "no turn will run for it" in said
    assert "no turn ran for this input within" not in said, said
    metrics = [line for line in said.splitlines() if line.startswith("  metrics")]
    assert len(metrics) == 1, said
    assert metrics[0].startswith("  metrics   http://127.0.0.1:")
    assert f":{DEFAULT_METRICS_PORTS['consume']}/" not in metrics[0]
