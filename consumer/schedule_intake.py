"""Schedule intake: ``outbound.schedule`` records become rows of the ``timers`` table.

Invariants:

- A fetched batch is stored in one database transaction, in offset order, and only after that
  commit are the batch's offsets committed. A crash in between replays the batch, and replaying
  is harmless: an upsert by key is idempotent, and an entry's ``replaces`` sits at a later offset
  of the same partition (one session, one partition) than the entry it deletes.
- A malformed record is logged (partition and offset, never its content) and skipped; it can
  never become valid by retrying, and holding the partition back on it would stop every timer
  behind it.
- Each stored batch pokes the firing loop, so a timer due sooner than the one it was sleeping
  towards is fired on time rather than at the end of a long sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from consumer import metrics
from consumer.errors import ScheduleRecordError
from store import TimerEntry

__all__ = ["ScheduleIntake", "TimerSink", "parse_schedule_record"]

log = logging.getLogger("turnflow.scheduler.intake")


class TimerSink(Protocol):
    """Where parsed entries go: the store's ``upsert_timers`` (one transaction per call)."""

    async def upsert_timers(self, entries: Sequence[TimerEntry]) -> None: ...


def _required_text(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise ScheduleRecordError(f"field {name!r} must be a non-empty string")
    return value


def _parse_at(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ScheduleRecordError("field 'at' must be an ISO-8601 string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ScheduleRecordError("field 'at' is not an ISO-8601 time") from exc
    # The engine writes aware UTC times; a naive one can only mean UTC.
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def parse_schedule_record(value: bytes | None) -> TimerEntry:
    """Parse one record value (``{"session_id","key","at","replaces"}``) or raise why not.

    ``replaces`` names an earlier timer the entry supersedes; the store deletes it in the same
    transaction that sets this one.
    """
    if value is None:
        raise ScheduleRecordError("record has no value")
    try:
        body = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ScheduleRecordError("record value is not JSON") from exc
    if not isinstance(body, dict):
        raise ScheduleRecordError("record value is not a JSON object")
    replaces = body.get("replaces")
    if replaces is not None and (not isinstance(replaces, str) or not replaces):
        raise ScheduleRecordError("field 'replaces' must be a non-empty string or null")
    return TimerEntry(
        session_id=_required_text(body, "session_id"),
        key=_required_text(body, "key"),
        at=_parse_at(body.get("at")),
        replaces=replaces,
    )


class ScheduleIntake:
    """Consumes ``outbound.schedule`` into the timers table; see the module docstring.

    ``consumer`` is an unstarted ``AIOKafkaConsumer`` subscribed to nothing yet, with
    auto-commit off; ``on_stored`` is called after every batch that stored at least one entry.
    """

    def __init__(
        self,
        *,
        consumer: AIOKafkaConsumer,
        topic: str,
        sink: TimerSink,
        on_stored: Callable[[], None],
        max_records: int = 500,
        poll_timeout: float = 0.5,
        retry_delay: float = 1.0,
    ) -> None:
        self._consumer = consumer
        self._topic = topic
        self._sink = sink
        self._on_stored = on_stored
        self._max_records = max_records
        self._poll_timeout_ms = int(poll_timeout * 1000)
        self._retry_delay = retry_delay
        self.healthy = False

    async def start(self) -> None:
        self._consumer.subscribe([self._topic])
        await self._consumer.start()

    async def stop(self) -> None:
        # Nothing is fetched-but-unstored here: every batch is stored and committed before the
        # next fetch, so stopping needs no final commit.
        await self._consumer.stop()

    async def run(self, stop: asyncio.Event) -> None:
        """Store batches until ``stop`` is set; errors are logged and retried, never fatal."""
        while not stop.is_set():
            try:
                await self.step()
                self.healthy = True
            except asyncio.CancelledError:
                raise
            except Exception:
                self.healthy = False
                log.exception("schedule intake failed; retrying")
                await _sleep_or_stop(stop, self._retry_delay)

    async def step(self) -> int:
        """Fetch, store and commit one batch; returns how many entries were stored."""
        fetched = await self._consumer.getmany(
            timeout_ms=self._poll_timeout_ms, max_records=self._max_records
        )
        if not fetched:
            return 0
        entries: list[TimerEntry] = []
        offsets: dict[TopicPartition, int] = {}
        for partition, records in fetched.items():
            for record in records:
                try:
                    entries.append(parse_schedule_record(record.value))
                except ScheduleRecordError as exc:
                    log.warning(
                        "skipping malformed schedule record",
                        extra={
                            "topic": partition.topic,
                            "partition": partition.partition,
                            "offset": record.offset,
                            "reason": str(exc),
                        },
                    )
                offsets[partition] = record.offset + 1
        if entries:
            try:
                await self._sink.upsert_timers(entries)
            except Exception:
                # Not stored: rewind so the same records are fetched again, in order. A
                # partition revoked meanwhile cannot be rewound; its new owner starts from the
                # last commit anyway.
                for partition in fetched:
                    with contextlib.suppress(IllegalStateError):
                        self._consumer.seek(partition, fetched[partition][0].offset)
                raise
            for entry in entries:
                action = "replace" if entry.replaces else "upsert"
                metrics.TIMERS_SCHEDULED.labels(action=action).inc()
            self._on_stored()
        try:
            await self._consumer.commit(offsets)
        except (CommitFailedError, KafkaError):
            # The group rebalanced under us; the new owner replays from the last commit, and
            # replaying stored entries is idempotent.
            log.warning("schedule offsets not committed; the batch will be replayed")
        return len(entries)


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        pass
