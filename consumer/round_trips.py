"""Readiness from recent round trips: ``/readyz`` means "able to do the job now".

A Kafka client reconnects quietly: a consumer whose broker died keeps "fetching" nothing, and a
flag set once at start would keep answering ready for as long as the outage lasts. Instead each
service probes the servers it needs (a metadata request to the broker, ``SELECT 1`` to the
database) every ``interval_s``; a server counts as up while its last probe succeeded and that
success is younger than ``fresh_s`` (a probe that hangs ages out too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["RoundTrips", "broker_probe", "database_probe"]

log = logging.getLogger("turnflow.health")

Probe = Callable[[], Awaitable[Any]]


class RoundTrips:
    """The last outcome of each named probe; ``fresh()`` when every one is up and recent."""

    def __init__(
        self,
        probes: dict[str, Probe],
        *,
        interval_s: float = 2.0,
        timeout_s: float = 3.0,
        fresh_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._probes = dict(probes)
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._fresh_s = fresh_s
        self._clock = clock
        self._last_ok: dict[str, float] = {}
        self._up: dict[str, bool] = {}
        self._task: asyncio.Task[None] | None = None

    def record(self, name: str, ok: bool) -> None:
        """Note one probe's outcome (the loop calls this; tests may too)."""
        if ok:
            self._last_ok[name] = self._clock()
        if self._up.get(name, True) != ok:
            log.warning("server %s", "answers again" if ok else "unreachable",
                        extra={"server": name})
        self._up[name] = ok

    def fresh(self) -> bool:
        """True while every probe's last outcome was a success within ``fresh_s``."""
        now = self._clock()
        return all(
            self._up.get(name, False) and now - self._last_ok.get(name, -1e18) <= self._fresh_s
            for name in self._probes
        )

    async def check_once(self) -> None:
        """Run every probe once, concurrently, each bounded by ``timeout_s``."""

        async def one(name: str, probe: Probe) -> None:
            try:
                await asyncio.wait_for(probe(), timeout=self._timeout_s)
            except Exception:  # any failure means "not now"; the kind is not the point here
                self.record(name, False)
            else:
                self.record(name, True)

        await asyncio.gather(*(one(name, probe) for name, probe in self._probes.items()))

    def start(self) -> None:
        """Probe in the background every ``interval_s`` until ``stop()``."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="round-trips")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        while True:
            await self.check_once()
            await asyncio.sleep(self._interval_s)


def broker_probe(client: Any) -> Probe:
    """A metadata request over ``client`` (an ``AIOKafkaClient``, e.g. ``producer.client``):
    it raises when no broker answers."""

    async def probe() -> None:
        await client.fetch_all_metadata()

    return probe


def database_probe(engine: Any) -> Probe:
    """``SELECT 1`` on a pooled connection of ``engine`` (an ``AsyncEngine``)."""
    from sqlalchemy import text

    query = text("SELECT 1")

    async def probe() -> None:
        async with engine.connect() as connection:
            await connection.execute(query)

    return probe
