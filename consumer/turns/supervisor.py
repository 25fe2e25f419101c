"""``turnflow consume --workers N``: N consumer processes on one machine, kept alive.

One Python process runs its turns on one core, so a machine is filled with one consumer per
core. The supervisor starts them as child processes, each a member of the consumer group
(partitions are shared among them like among pods), and:

- restarts a worker that dies, after a back-off that doubles up to ``max_backoff`` and starts
  over once a worker has run ``healthy_after`` seconds; a worker that exits with the
  configuration exit code (a bad agent, a missing setting) is not restarted — nothing a
  restart changes — and the supervisor stops the others and exits with that code;
- retries a worker that fails to start (the spawn itself raises: ``EAGAIN``, ``ENOMEM``, a
  Python binary gone after an upgrade) on the same back-off, logging each failure; a slot whose
  last start failed makes the exit code 1 at stop, since that worker never ran to drain;
- on SIGTERM or SIGINT forwards SIGTERM to every worker, waits for each to drain and exit
  (SIGKILL after ``stop_timeout``), and exits 0 when every worker did. The watchers are
  stopped before the workers are signalled, so a restart spawning at that moment is either
  killed half-made or signalled with the rest: no worker outlives the supervisor;
- stops the workers and exits 1 if a slot's watcher fails (a supervisor bug): a slot nobody
  watches would stay empty unseen, so the fault ends the run where its exit code shows it.

Worker ``i`` serves its metrics and health port on ``METRICS_PORT + i`` (ports off stay off),
and only worker 0 runs the outbox relay: one relay per machine is enough, and more would only
race each other over the same rows. The supervisor itself opens no port and no connection.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from consumer.stopping import stopped_within

__all__ = ["SupervisorOptions", "WorkerSupervisor", "available_cores", "worker_command"]

log = logging.getLogger("turnflow.supervisor")

EXIT_CONFIG = 2


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - platforms without sched_getaffinity
        return max(1, os.cpu_count() or 1)


def worker_command(index: int, *, agent: str | None, relay: bool) -> list[str]:
    """The command line of worker ``index``: a one-process ``turnflow consume``."""
    command = [sys.executable, "-m", "consumer.cli", "consume", "--workers", "1"]
    if agent:
        command += ["--agent", agent]
    if not relay or index > 0:
        command.append("--no-relay")
    return command


def worker_environment(index: int, base: dict[str, str], *, first_port: int) -> dict[str, str]:
    """The environment of worker ``index``: metrics on ``first_port + index`` (``first_port``
    0 keeps every worker's port off), the rest as given."""
    env = dict(base)
    env["METRICS_PORT"] = str(first_port + index if first_port else 0)
    env["TURNFLOW_WORKER_INDEX"] = str(index)
    return env


@dataclass(frozen=True)
class SupervisorOptions:
    """Back-off and stop timings, in seconds."""

    min_backoff: float = 1.0
    max_backoff: float = 30.0
    healthy_after: float = 60.0
    stop_timeout: float = 60.0


@dataclass
class _Worker:
    index: int
    process: asyncio.subprocess.Process | None = None
    started_at: float = 0.0
    backoff: float = 0.0
    restarts: int = 0
    exits: list[int] = field(default_factory=list)
    start_failed: bool = False


class WorkerSupervisor:
    """Keeps ``workers`` processes running until ``stop()``; see the module docstring.

    ``command(i)`` and ``environment(i)`` give worker ``i``'s command line and environment, so
    tests can supervise any program.
    """

    def __init__(
        self,
        workers: int,
        command: Callable[[int], Sequence[str]],
        environment: Callable[[int], dict[str, str]],
        options: SupervisorOptions | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self._workers = [_Worker(i) for i in range(workers)]
        self._command = command
        self._environment = environment
        self._options = options or SupervisorOptions()
        self._stopping = asyncio.Event()
        self.exit_code = 0

    @property
    def restarts(self) -> int:
        """How many times a worker was started again after dying."""
        return sum(w.restarts for w in self._workers)

    def pids(self) -> list[int | None]:
        """The running workers' process ids, by index (None while one is down)."""
        return [
            w.process.pid if w.process is not None and w.process.returncode is None else None
            for w in self._workers
        ]

    def stop(self) -> None:
        """Ask every worker to drain and exit (safe from a signal handler)."""
        self._stopping.set()

    async def run(self) -> int:
        """Run until stopped (or a worker reports a configuration error); the exit code."""
        watchers = [asyncio.create_task(self._keep(w)) for w in self._workers]
        stopping = asyncio.create_task(self._stopping.wait())
        log.info("supervisor ready", extra={"workers": len(self._workers)})
        try:
            # A watcher only returns once stopping is set; one that ends before has failed.
            done, _ = await asyncio.wait(
                [stopping, *watchers], return_when=asyncio.FIRST_COMPLETED
            )
            for worker, watcher in zip(self._workers, watchers, strict=True):
                if watcher in done and watcher.exception() is not None:
                    log.error("worker watcher failed; stopping", exc_info=watcher.exception(),
                              extra={"worker": worker.index})
                    self.exit_code = self.exit_code or 1
        finally:
            stopping.cancel()
            # Watchers first: once they are gone nothing starts a worker, so the one terminate
            # pass below sees every child (a spawn cancelled half-way kills its own child).
            for watcher in watchers:
                watcher.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)
            await self._terminate_all()
        if any(w.start_failed for w in self._workers) and self.exit_code == 0:
            self.exit_code = 1
        log.info("supervisor stopped", extra={"exit_code": self.exit_code})
        return self.exit_code

    async def _start(self, worker: _Worker) -> asyncio.subprocess.Process:
        worker.process = await asyncio.create_subprocess_exec(
            *self._command(worker.index), env=self._environment(worker.index)
        )
        worker.started_at = time.monotonic()
        log.info("worker started", extra={"worker": worker.index, "pid": worker.process.pid})
        return worker.process

    async def _keep(self, worker: _Worker) -> None:
        """Start ``worker`` and start it again whenever it dies, until stopping."""
        while not self._stopping.is_set():
            try:
                process = await self._start(worker)
            except Exception:
                worker.start_failed = True
                self._back_off(worker, ran=0.0)
                log.exception("worker failed to start; retrying",
                              extra={"worker": worker.index, "backoff_s": worker.backoff})
                if await stopped_within(self._stopping, worker.backoff):
                    return
                continue
            worker.start_failed = False
            code = await process.wait()
            if self._stopping.is_set():
                return
            worker.exits.append(code)
            if code == EXIT_CONFIG:
                log.error("worker failed its configuration; stopping",
                          extra={"worker": worker.index, "exit_code": code})
                self.exit_code = EXIT_CONFIG
                self._stopping.set()
                return
            ran = time.monotonic() - worker.started_at
            self._back_off(worker, ran=ran)
            log.warning("worker exited; restarting",
                        extra={"worker": worker.index, "exit_code": code,
                               "ran_s": round(ran, 1), "backoff_s": worker.backoff})
            worker.restarts += 1
            if await stopped_within(self._stopping, worker.backoff):
                return

    def _back_off(self, worker: _Worker, *, ran: float) -> None:
        """Set the wait before ``worker``'s next start: ``min_backoff`` after a healthy run (or
        the first time), else double the last, up to ``max_backoff``."""
        options = self._options
        if ran >= options.healthy_after or worker.backoff == 0:
            worker.backoff = options.min_backoff
        else:
            worker.backoff = min(worker.backoff * 2, options.max_backoff)

    async def _terminate_all(self) -> None:
        running = [
            w.process for w in self._workers
            if w.process is not None and w.process.returncode is None
        ]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self._options.stop_timeout
        for process in running:
            try:
                code = await asyncio.wait_for(
                    process.wait(), timeout=max(0.0, deadline - time.monotonic())
                )
            except TimeoutError:
                log.error("worker did not stop in time; killing", extra={"pid": process.pid})
                process.kill()
                code = await process.wait()
            if code != 0 and self.exit_code == 0:
                self.exit_code = code if code > 0 else 1
