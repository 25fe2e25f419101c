"""A ``turnflow consume`` process under load, and the CPU a process (or PostgreSQL) spent,
read from Linux ``/proc``."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from pathlib import Path

from bench.harness import REPO

__all__ = [
    "ConsumerProcess",
    "cpu_seconds",
    "database_cpu_seconds",
    "own_cpu_seconds",
    "proc_stat",
]


class ConsumerProcess:
    """``python -m consumer.cli consume`` (optionally under pyinstrument) for one run."""

    # A run whose turns failed and ran again still ends with every reply once and in order, so
    # the figures would look valid while measuring retries: these log lines are counted and
    # shown with the run.
    TROUBLES = {
        "input failed; retrying": "retried",
        "version conflict; rerunning": "rerun after a version conflict",
        "replay skipped": "replays skipped",
        "sent to the DLQ": "dead-lettered",
        "session worker crashed": "worker crashes",
    }

    def __init__(self, env: dict[str, str], profile_to: Path | None = None) -> None:
        self._env = env
        self._profile_to = profile_to
        self._process: asyncio.subprocess.Process | None = None
        self._log_task: asyncio.Task[None] | None = None
        self.assigned = asyncio.Event()
        self.tail: list[str] = []
        self.troubles: Counter[str] = Counter()

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def command(self) -> tuple[list[str], Path]:
        """What to run and where: ``turnflow consume`` from this tree (under pyinstrument when
        profiled). A benchmark that runs another consumer gives its own."""
        prefix: list[str] = [sys.executable]
        if self._profile_to is not None:
            prefix += ["-m", "pyinstrument", "-r", "session", "-o", str(self._profile_to)]
        return [*prefix, "-m", "consumer.cli", "consume"], REPO

    async def start(self, within: float = 60.0) -> None:
        """Start the process and wait until it has partitions assigned."""
        argv, cwd = self.command()
        self._process = await asyncio.create_subprocess_exec(
            *argv, env=self._env, cwd=str(cwd), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )
        self._log_task = asyncio.create_task(self._read_logs())
        try:
            await asyncio.wait_for(self.assigned.wait(), timeout=within)
        except TimeoutError:
            raise RuntimeError(f"consumer not ready: {self.tail[-5:]}") from None

    async def _read_logs(self) -> None:
        assert self._process is not None and self._process.stderr is not None
        while line := await self._process.stderr.readline():
            text = line.decode(errors="replace")
            if '"partitions assigned"' in text:
                self.assigned.set()
            for needle, name in self.TROUBLES.items():
                if needle in text:
                    self.troubles[name] += 1
            self.tail = [*self.tail[-20:], text.rstrip()]

    async def stop(self) -> None:
        if self._process is None:
            return
        if self._process.returncode is None:
            self._process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self._process.wait(), timeout=60)
        except TimeoutError:
            self._process.kill()
            await self._process.wait()
        if self._log_task is not None:
            await asyncio.gather(self._log_task, return_exceptions=True)


def proc_stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its live children (Linux ``/proc``: the workers of
    ``consume --workers N``), 0.0 where unavailable."""
    pids = [pid]
    for entry in Path("/proc").iterdir():
        fields = proc_stat(int(entry.name)) if entry.name.isdigit() else None
        if fields is not None and int(fields[1]) == pid:
            pids.append(int(entry.name))
    ticks = 0
    for one in pids:
        fields = proc_stat(one)
        if fields is not None:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds(pid: int) -> float:
    """User + system CPU of one process alone (a PostgreSQL backend, say), nan where
    unreadable."""
    fields = proc_stat(pid)
    if fields is None:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_LOCAL_HOSTS = {"", "localhost", "127.0.0.1", "::1"}


def database_cpu_seconds(url: str) -> float | None:
    """User + system CPU of every PostgreSQL process on this host (Linux ``/proc``), with the
    children's times each one has reaped (the postmaster's: backends that exited); None when
    the database is on another host or no such process can be read. Any other PostgreSQL
    running here is counted too."""
    from sqlalchemy.engine import make_url

    host = make_url(url).host or ""
    if host not in _LOCAL_HOSTS and not host.startswith("/"):
        return None
    ticks, found = 0, False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "postgres":
                continue
        except OSError:
            continue
        fields = proc_stat(int(entry.name))
        if fields is not None:
            found = True
            ticks += sum(int(fields[i]) for i in (11, 12, 13, 14))
    return ticks / os.sysconf("SC_CLK_TCK") if found else None
