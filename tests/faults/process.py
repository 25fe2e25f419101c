"""``turnflow consume`` as a real process on one test's topics, group and database.

``FaultSetup`` holds what a fault test shares between consumer processes (topics, group,
environment); ``ConsumerProcess`` starts one (``python -m consumer.cli consume``), reads its JSON
logs continuously so the pipe never fills, and is stopped by SIGTERM, killed by SIGKILL, or left
to crash through ``TURNFLOW_CRASH_AT``. ``consumers`` always kills what is still running when the
test ends, so no test leaves a process behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.faults.ledger import Ledger
from tests.fixtures.broker import TopicFactory
from tests.integration.harness import produce

REPO = Path(__file__).resolve().parents[2]
AGENT = "tests.faults.agent:fault_agent"

INBOUND = "inbound.turns"
MESSAGES = "outbound.messages"
SCHEDULE = "outbound.schedule"
DLQ = "inbound.turns.dlq"


@dataclass
class FaultSetup:
    """Topics, group and environment of one fault test."""

    bootstrap: str
    database_url: str
    topics: dict[str, str]
    embedded: bool
    group_id: str = field(default_factory=lambda: f"faults-{uuid.uuid4().hex[:8]}")
    inputs: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    async def create(
        cls, kafka_topics: TopicFactory, bootstrap: str, database_url: str, *,
        embedded: bool, partitions: int = 2,
    ) -> FaultSetup:
        topics = await kafka_topics(INBOUND, MESSAGES, SCHEDULE, DLQ, partitions=partitions)
        return cls(bootstrap, database_url, topics, embedded)

    def env(self, **overrides: str) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("TURNFLOW_CRASH_AT", None)
        env.update({
            "PYTHONPATH": str(REPO),
            "DATABASE_URL": self.database_url,
            "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            "INBOUND_TOPIC": self.topics[INBOUND],
            "MESSAGES_TOPIC": self.topics[MESSAGES],
            "SCHEDULE_TOPIC": self.topics[SCHEDULE],
            "DLQ_TOPIC": self.topics[DLQ],
            "GROUP_ID": self.group_id,
            "AGENT": AGENT,
            "METRICS_PORT": "0",
            "MAX_IN_FLIGHT": "16",
            # One turn per record: the fault tests count replies per input.
            "MERGE_BURSTS": "false",
            "HEARTBEAT_INTERVAL_MS": "300",
            "SESSION_TIMEOUT_MS": "3000",
            "DRAIN_TIMEOUT_MS": "3000",
            "RETRY_BACKOFF_MS": "50",
            "RETRY_BACKOFF_MAX_MS": "200",
            "MAX_RETRIES": "3",
            "RELAY_INTERVAL_MS": "300",
            "RELAY_GRACE_MS": "2000",
            "KAFKA_IDEMPOTENT_PRODUCER": "false" if self.embedded else "true",
        })
        env.update(overrides)
        return env

    @property
    def session_ids(self) -> list[str]:
        return sorted({r["session_id"] for r in self.inputs})

    async def produce(self, records: list[dict[str, Any]]) -> None:
        """Produce inputs to the inbound topic and remember them for the checks."""
        await produce(self.bootstrap, self.topics[INBOUND], list(records))
        self.inputs.extend(records)

    def ledger(self) -> Ledger:
        """A ledger of this test's outbound message and schedule topics."""
        return Ledger(self.bootstrap, messages_topic=self.topics[MESSAGES],
                      schedule_topic=self.topics[SCHEDULE])


SetupFactory = Callable[..., Awaitable[FaultSetup]]
"""The ``fault_setup`` fixture: ``await fault_setup(partitions=n)`` gives a fresh ``FaultSetup``."""


def message(session_id: str, label: str, **context: Any) -> dict[str, Any]:
    """An inbound message whose label the counting agent echoes; ``context`` adds switches."""
    return {
        "session_id": session_id,
        "message": label,
        "id": f"wamid.{uuid.uuid4().hex[:12]}",
        "context": {"label": label, **context},
    }


class ConsumerProcess:
    """One ``turnflow consume`` process and the log lines it wrote."""

    def __init__(
        self, env: dict[str, str], name: str = "consumer", *,
        command: tuple[str, ...] = ("consume", "--workers", "1"),
    ) -> None:
        self._env = env
        self.name = name
        self.command = command
        self.logs: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(
        self, *, ready_within: float = 30.0, assigned: bool = True, ready: str | None = None
    ) -> None:
        """Start; return once it logged ``consumer ready`` (and got partitions), or ``ready``
        (``scheduler ready`` for ``command=("schedule",)``)."""
        self._process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "consumer.cli", *self.command,
            env=self._env, cwd=str(REPO), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )
        self._reader = asyncio.create_task(self._read_logs())
        wanted = ready or ("partitions assigned" if assigned else "consumer ready")
        async with asyncio.timeout(ready_within):
            while not self.logged(wanted):
                if self._process.returncode is not None:
                    raise AssertionError(f"{self.name} exited early: {self.raw[-20:]}")
                await asyncio.sleep(0.05)

    async def _read_logs(self) -> None:
        assert self._process is not None and self._process.stderr is not None
        while line := await self._process.stderr.readline():
            text = line.decode(errors="replace").rstrip()
            self.raw.append(text)
            if text.startswith("{"):
                try:
                    self.logs.append(json.loads(text))
                except ValueError:
                    pass

    def logged(self, message: str) -> int:
        """How many log lines carry ``message``."""
        return sum(1 for entry in self.logs if entry.get("message") == message)

    @property
    def env(self) -> dict[str, str]:
        """The environment it runs with (a replacement process takes the same)."""
        return self._env

    @property
    def returncode(self) -> int | None:
        return self._process.returncode if self._process is not None else None

    async def wait(self, *, within: float = 30.0) -> int:
        """Wait for the process to exit (a planned crash, a stop); its exit code."""
        assert self._process is not None
        code = await asyncio.wait_for(self._process.wait(), timeout=within)
        if self._reader is not None:
            await asyncio.wait_for(self._reader, timeout=5)
        return code

    async def stop(self, *, within: float = 30.0) -> int:
        """SIGTERM and wait for the clean exit."""
        if self._process is not None and self._process.returncode is None:
            self._process.send_signal(signal.SIGTERM)
        return await self.wait(within=within)

    async def kill(self) -> int:
        """SIGKILL: no shutdown at all."""
        if self._process is not None and self._process.returncode is None:
            self._process.kill()
        return await self.wait()


@asynccontextmanager
async def consumers() -> AsyncIterator[list[ConsumerProcess]]:
    """A list to register started processes in; any still running at the end is killed."""
    started: list[ConsumerProcess] = []
    try:
        yield started
    finally:
        for process in started:
            if process.returncode is None:
                await process.kill()
        _keep_logs(started)


def _keep_logs(started: list[ConsumerProcess]) -> None:
    """With ``TURNFLOW_FAULT_LOGS`` set to a folder, every process's log is written there, for
    reading what a failing run did."""
    folder = os.environ.get("TURNFLOW_FAULT_LOGS")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    for process in started:
        (Path(folder) / f"{process.name}-{id(process)}.log").write_text("\n".join(process.raw))


async def start_scheduler(
    setup: FaultSetup, env: dict[str, str], started: list[ConsumerProcess], *, max_idle: str
) -> ConsumerProcess:
    """A scheduler in its own group (``GROUP_ID`` + ``-scheduler``) on ``env``, registered in
    ``started`` and awaited until ready; ``max_idle`` is its ``--max-idle`` in seconds."""
    scheduler = ConsumerProcess(
        {**env, "GROUP_ID": f"{setup.group_id}-scheduler"}, "scheduler",
        command=("schedule", "--max-idle", max_idle),
    )
    started.append(scheduler)
    await scheduler.start(ready="scheduler ready")
    return scheduler
