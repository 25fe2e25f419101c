"""The outbox relay: republishes outbox rows a crash left unpublished, and prunes what is past
its retention.

It runs alone (``turnflow relay``) and inside every consume service, whose own relay pass is the
safety net for its replicas' crashes. It sends through ``consumer.outbox.OutboxPublisher``, the
same path a turn's own rows take, so order per session and the set-aside of unsendable rows are
the publisher's, not repeated here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta

from consumer import metrics
from consumer.outbox import OutboxPublisher
from consumer.stopping import stopped_within
from store import Store
from store.partitions import Unit

PRUNE_EVERY_S = 600.0
"""How often the relay drops expired model recordings and published outbox rows past their
retention (the first pass prunes at once)."""

__all__ = ["PRUNE_EVERY_S", "OutboxRelay"]

log = logging.getLogger("turnflow.outbox")


class OutboxRelay:
    """Republishes rows committed but left unpublished, every ``interval_s``, until stopped;
    every ``prune_every_s`` it also drops what is past its retention (model recordings,
    published rows, dead letters)."""

    def __init__(
        self,
        publisher: OutboxPublisher,
        store: Store,
        *,
        interval_s: float,
        grace_s: float,
        recording_retention: timedelta | None = None,
        outbox_retention: timedelta | None = None,
        dead_letter_retention: timedelta | None = None,
        turn_retention: timedelta | None = None,
        turn_partition: Unit = "month",
        prune_every_s: float = PRUNE_EVERY_S,
    ) -> None:
        self._publisher = publisher
        self._store = store
        self._interval_s = interval_s
        self._grace = timedelta(seconds=grace_s)
        self._stopping = asyncio.Event()
        self._retention = recording_retention
        self._outbox_retention = outbox_retention
        self._dead_letter_retention = dead_letter_retention
        self._turn_retention = turn_retention
        self._turn_partition = turn_partition
        self._prune_every_s = prune_every_s
        self._next_prune = 0.0

    def stop(self) -> None:
        self._stopping.set()

    async def run_once(self) -> int:
        """One pass: publish what is old enough, refresh the backlog gauge; rows published."""
        total = 0
        while True:
            sent = await self._publisher.flush_older(older_than=self._grace)
            total += sent
            if sent == 0:
                break
        metrics.OUTBOX_BACKLOG.set(await self._store.outbox_backlog())
        if total:
            log.info("relay published outbox rows", extra={"rows": total})
        await self.prune()
        return total

    async def prune(self) -> tuple[int, int, int]:
        """At most once per ``prune_every_s``: drop model recordings past their retention (a
        promise about personal data, kept by whoever runs the relay), outbox rows published
        longer ago than theirs (else the outbox grows by every reply and timer for good), and
        dead letters and dead-lettered sources past theirs (a poison record kept in full, up to
        the broker's size limit, is not kept forever). Returns (turns whose recordings were
        dropped, outbox rows deleted, dead letters and dead-lettered sources deleted)."""
        if time.monotonic() < self._next_prune:
            return 0, 0, 0
        self._next_prune = time.monotonic() + self._prune_every_s
        dropped = deleted = letters = 0
        if self._retention is not None:
            dropped = await self._store.prune_recordings(older_than=self._retention)
            if dropped:
                log.info("relay dropped expired model recordings", extra={"turns": dropped})
        if self._outbox_retention is not None:
            deleted = await self._store.delete_published(older_than=self._outbox_retention)
            if deleted:
                log.info("relay deleted published outbox rows", extra={"rows": deleted})
        if self._dead_letter_retention is not None:
            kept, sources = await self._store.prune_dead_letters(
                older_than=self._dead_letter_retention
            )
            letters = kept + sources
            if letters:
                log.info("relay deleted expired dead letters", extra={"rows": letters})
        await self._turn_log()
        return dropped, deleted, letters

    async def _turn_log(self) -> None:
        """The turn log's partitions: the next months' or days' (``turn_partition``) made
        ahead, those past ``turn_retention`` dropped whole (store/partitions.py)."""
        made = await self._store.ensure_turn_partitions(unit=self._turn_partition)
        if made:
            log.info("relay made turn log partitions", extra={"partitions": made})
        compacted = await self._store.compact_turn_search()
        if compacted:
            log.info("relay compacted ended partitions' search indexes",
                     extra={"indexes": compacted})
        if self._turn_retention is not None:
            gone = await self._store.drop_expired_turns(older_than=self._turn_retention)
            if gone.partitions or gone.default_rows or gone.sessions:
                log.info("relay dropped expired turns", extra={
                    "partitions": gone.partitions, "rows": gone.default_rows,
                    "sessions": gone.sessions})

    async def run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.run_once()
            except Exception as exc:
                # The relay is the safety net: it must outlive a database or broker blip.
                log.warning("relay pass failed", extra={"error": type(exc).__name__})
            await stopped_within(self._stopping, self._interval_s)
