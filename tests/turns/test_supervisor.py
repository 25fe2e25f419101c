"""The worker supervisor: restarts a dead worker, forwards SIGTERM, stops on a config error."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from consumer.turns.supervisor import (
    SupervisorOptions,
    WorkerSupervisor,
    _Worker,
    worker_command,
    worker_environment,
)

FAST = SupervisorOptions(min_backoff=0.05, max_backoff=0.2, healthy_after=5.0, stop_timeout=5.0)

# A stand-in worker: appends "start" to its log, dies with the exit code in its "die" file
# (once: the file is removed), otherwise runs until SIGTERM, logs "stop" and exits 0 (half a
# second later with a "slow-stop" file: a drain that takes a while).
WORKER = r"""
import os, signal, sys, time
folder = sys.argv[1]
log = os.path.join(folder, f"worker-{os.environ['TURNFLOW_WORKER_INDEX']}.log")
with open(log, "a") as f:
    f.write("start\n")
die = os.path.join(folder, f"die-{os.environ['TURNFLOW_WORKER_INDEX']}")
if os.path.exists(die):
    code = int(open(die).read())
    os.remove(die)
    sys.exit(code)
def stop(*_):
    if os.path.exists(os.path.join(folder, "slow-stop")):
        time.sleep(0.5)
    with open(log, "a") as f:
        f.write("stop\n")
    sys.exit(0)
if os.path.exists(os.path.join(folder, "ignore-term")):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, stop)
with open(os.path.join(folder, f"ready-{os.getpid()}"), "w"):
    pass
while True:
    time.sleep(0.05)
"""


def _supervisor(folder: Path, workers: int) -> WorkerSupervisor:
    return WorkerSupervisor(
        workers,
        command=lambda i: [sys.executable, "-c", WORKER, str(folder)],
        environment=lambda i: worker_environment(i, dict(os.environ), first_port=0),
        options=FAST,
    )


def _log(folder: Path, index: int) -> list[str]:
    path = folder / f"worker-{index}.log"
    return path.read_text().split() if path.exists() else []


async def _until(predicate: Callable[[], bool], within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110 - other processes' files are the signal
            await asyncio.sleep(0.02)


async def test_every_worker_starts_and_sigterm_drains_them_all(tmp_path: Path) -> None:
    """Three workers start; stop() sends each SIGTERM, waits for it, and the exit code is 0."""
    supervisor = _supervisor(tmp_path, 3)
    running = asyncio.create_task(supervisor.run())
    await _until(lambda: len(list(tmp_path.glob("ready-*"))) == 3)
    assert all(pid is not None for pid in supervisor.pids())
    supervisor.stop()
    assert await running == 0
    assert [_log(tmp_path, i) for i in range(3)] == [["start", "stop"]] * 3


async def test_a_dead_worker_is_started_again(tmp_path: Path) -> None:
    """A worker that dies (exit 1) is restarted after the back-off; the others are untouched."""
    (tmp_path / "die-1").write_text("1")
    supervisor = _supervisor(tmp_path, 2)
    running = asyncio.create_task(supervisor.run())
    await _until(lambda: len(list(tmp_path.glob("ready-*"))) == 2)
    assert supervisor.restarts == 1
    assert _log(tmp_path, 0) == ["start"]
    assert _log(tmp_path, 1) == ["start", "start"]
    supervisor.stop()
    assert await running == 0


async def test_a_killed_worker_is_started_again(tmp_path: Path) -> None:
    """A worker killed from outside (SIGKILL, the OOM killer) comes back with a new pid."""
    supervisor = _supervisor(tmp_path, 2)
    running = asyncio.create_task(supervisor.run())
    await _until(lambda: len(list(tmp_path.glob("ready-*"))) == 2)
    victim = supervisor.pids()[0]
    assert victim is not None
    os.kill(victim, 9)
    await _until(lambda: len(list(tmp_path.glob("ready-*"))) == 3)
    assert supervisor.pids()[0] not in (None, victim)
    supervisor.stop()
    assert await running == 0


async def test_a_configuration_failure_stops_everything(tmp_path: Path) -> None:
    """Exit code 2 (bad agent or setting) is not retried: the others stop, the code is 2."""
    supervisor = _supervisor(tmp_path, 2)
    running = asyncio.create_task(supervisor.run())
    await _until(lambda: len(list(tmp_path.glob("ready-*"))) == 2)
    (tmp_path / "die-0").write_text("2")
    victim = supervisor.pids()[0]
    assert victim is not None
    os.kill(victim, 9)  # it comes back, reads die-0 and exits 2
    assert await asyncio.wait_for(running, 10) == 2
    assert supervisor.restarts == 1
    assert _log(tmp_path, 1) == ["start", "stop"]


async def test_a_worker_that_ignores_sigterm_is_killed_and_the_exit_code_says_so(
    tmp_path: Path,
) -> None:
    """A worker still running at the stop timeout is killed; the supervisor exits non-zero."""
    (tmp_path / "ignore-term").write_text("")
    supervisor = WorkerSupervisor(
        1,
        command=lambda i: [sys.executable, "-c", WORKER, str(tmp_path)],
        environment=lambda i: worker_environment(i, dict(os.environ), first_port=0),
        options=SupervisorOptions(stop_timeout=0.5),
    )
    running = asyncio.create_task(supervisor.run())
    await _until(lambda: len(list(tmp_path.glob("ready-*"))) == 1)
    supervisor.stop()
    assert await asyncio.wait_for(running, 10) == 1


async def test_a_worker_that_fails_to_start_is_tried_again(tmp_path: Path) -> None:
    """A spawn that raises (EAGAIN, ENOMEM, a binary gone) is retried on the back-off: the
    slot fills once spawning works again, and a clean stop then still exits 0."""
    attempts = [0]

    def command(i: int) -> list[str]:
        attempts[0] += 1
        if attempts[0] <= 2:
            return [str(tmp_path / "no-such-python")]
        return [sys.executable, "-c", WORKER, str(tmp_path)]

    supervisor = WorkerSupervisor(
        1, command, lambda i: worker_environment(i, dict(os.environ), first_port=0), FAST
    )
    running = asyncio.create_task(supervisor.run())
    await _until(lambda: len(list(tmp_path.glob("ready-*"))) == 1)
    assert attempts[0] == 3
    assert supervisor.pids()[0] is not None
    supervisor.stop()
    assert await asyncio.wait_for(running, 10) == 0


async def test_a_worker_that_cannot_be_started_is_not_reported_as_fine(tmp_path: Path) -> None:
    """A slot whose spawns keep failing keeps being retried, and the exit code at stop is 1:
    that worker never ran, so it did not drain and exit 0."""
    attempts = [0]

    def command(i: int) -> list[str]:
        attempts[0] += 1
        return [str(tmp_path / "no-such-python")]

    supervisor = WorkerSupervisor(1, command, lambda i: dict(os.environ), FAST)
    running = asyncio.create_task(supervisor.run())
    await _until(lambda: attempts[0] >= 3)
    assert not running.done()
    supervisor.stop()
    assert await asyncio.wait_for(running, 10) == 1


async def test_a_failed_watcher_stops_the_supervisor_with_exit_code_1(tmp_path: Path) -> None:
    """A slot's watcher that fails (a supervisor bug) is not left dead and unseen: the other
    workers are stopped and the exit code is 1."""

    class Broken(WorkerSupervisor):
        async def _keep(self, worker: _Worker) -> None:
            if worker.index == 1:
                await _until(lambda: len(list(tmp_path.glob("ready-*"))) == 1)
                raise RuntimeError("watcher bug")
            await super()._keep(worker)

    supervisor = Broken(
        2,
        command=lambda i: [sys.executable, "-c", WORKER, str(tmp_path)],
        environment=lambda i: worker_environment(i, dict(os.environ), first_port=0),
        options=FAST,
    )
    assert await asyncio.wait_for(supervisor.run(), 10) == 1
    assert _log(tmp_path, 0) == ["start", "stop"]


def _running(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line holds ``marker``."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(proc.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("spawn_delay", [0.0, 0.05])
async def test_a_worker_started_while_stopping_does_not_outlive_the_supervisor(
    tmp_path: Path, spawn_delay: float
) -> None:
    """SIGTERM arriving while a dead worker is being started again: that start is cancelled
    (a half-made child is killed) or its worker is signalled with the rest, never orphaned.
    The delay stands in for a fork/exec slowed by load, ending while worker 0 still drains;
    without it the stop lands inside asyncio's own spawn."""
    (tmp_path / "die-1").write_text("1")
    (tmp_path / "slow-stop").write_text("")
    starts = [0]

    class StopDuringRestart(WorkerSupervisor):
        async def _start(self, worker: _Worker) -> asyncio.subprocess.Process:
            if worker.index == 1:
                starts[0] += 1
                if starts[0] == 2:
                    await _until(lambda: len(list(tmp_path.glob("ready-*"))) == 1)
                    self.stop()
                    await asyncio.sleep(spawn_delay)
            return await super()._start(worker)

    supervisor = StopDuringRestart(
        2,
        command=lambda i: [sys.executable, "-c", WORKER, str(tmp_path)],
        environment=lambda i: worker_environment(i, dict(os.environ), first_port=0),
        options=FAST,
    )
    try:
        await asyncio.wait_for(supervisor.run(), 10)
        assert starts[0] == 2
        assert _running(str(tmp_path)) == []
    finally:
        for pid in _running(str(tmp_path)):
            os.kill(pid, signal.SIGKILL)


def test_each_worker_gets_its_own_metrics_port_and_one_relay() -> None:
    """Worker i serves on METRICS_PORT + i (0 stays off); only worker 0 runs the relay."""
    port = worker_environment(2, {"METRICS_PORT": "9100"}, first_port=9100)["METRICS_PORT"]
    assert port == "9102"
    assert worker_environment(2, {}, first_port=9100)["METRICS_PORT"] == "9102"
    assert worker_environment(2, {"METRICS_PORT": "0"}, first_port=0)["METRICS_PORT"] == "0"
    assert "--no-relay" not in worker_command(0, agent="a:b", relay=True)
    assert "--no-relay" in worker_command(1, agent="a:b", relay=True)
    assert "--no-relay" in worker_command(0, agent="a:b", relay=False)
    assert worker_command(0, agent="a:b", relay=True)[-4:] == ["--workers", "1", "--agent", "a:b"]


def test_zero_workers_is_refused() -> None:
    """A supervisor of no workers is a configuration mistake, refused at construction."""
    with pytest.raises(ValueError, match="at least 1"):
        WorkerSupervisor(0, command=lambda i: [], environment=lambda i: {})
