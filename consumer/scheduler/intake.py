"""Schedule intake: ``outbound.schedule`` records become rows of the ``timers`` table.

Invariants:

- A fetched batch is stored in one database transaction, in offset order, and only after that
  commit are the batch's offsets committed. A crash in between replays the batch, and replaying
  is harmless: an upsert by key is idempotent, and an entry's ``replaces`` sits at a later offset
  of the same partition (one session, one partition) than the entry it deletes.
- A malformed record is refused at once: logged with its reason code (partition and offset,
  never its content), counted in ``turnflow_schedule_refused_total`` and skipped; it can never
  become valid by retrying, and holding the partition back on it would stop every timer behind
  it. ``parse_schedule_record`` raises nothing but ``ScheduleRecordError``, whatever the bytes:
  text the database cannot store (NUL, a lone surrogate) and an ``at`` that leaves years
  1-9999 once moved to UTC are refused there.
- When the batch's write fails with an error no retry can fix (``consumer.failures``), the
  batch is written again one entry at a time, in offset order, and only the entries that fail
  that way are refused; any other failure rewinds the batch as before. Entry by entry is as
  safe to replay as the batch, for the same reasons.
- With tracing on, the well-formed trace context on a record's headers (the turn that set the
  timer) is stored with its timer, for the wake to link to; any other header value is ignored.
- With a group (``group``, the service's), the database keeps the intake's position per
  partition, moved in the batch's own transaction, and each partition starts there on
  assignment; a batch whose positions are not where the intake left them (a failover lost the
  last batches) writes nothing and the partition is read again from the stored position
  (``consumer.scheduler.positions``).
- Each stored batch pokes the firing loop, so a timer due sooner than the one it was sleeping
  towards is fired on time rather than at the end of a long sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol, cast

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from consumer import metrics, tracing
from consumer.errors import ScheduleRecordError
from consumer.failures import cannot_succeed, describe
from consumer.scheduler.positions import IntakePositions, PositionedSink
from consumer.stopping import stopped_within
from engine.clock import to_utc
from store import PositionsMoved, TimerEntry
from store.positions import PositionsUpdate

__all__ = ["ScheduleIntake", "TimerSink", "parse_schedule_record"]

log = logging.getLogger("turnflow.scheduler.intake")


class TimerSink(Protocol):
    """Where parsed entries go: the store's ``upsert_timers`` (one transaction per call)."""

    async def upsert_timers(self, entries: Sequence[TimerEntry]) -> None: ...


def _text_problem(value: str) -> str | None:
    if "\x00" in value:
        return "holds U+0000 (NUL)"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone surrogate"
    return None


def _required_text(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise ScheduleRecordError(f"field {name!r} must be a non-empty string")
    problem = _text_problem(value)
    if problem is not None:
        raise ScheduleRecordError(f"field {name!r} {problem}", reason="invalid-text")
    return value


def _parse_at(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ScheduleRecordError("field 'at' must be an ISO-8601 string")
    try:
        # The engine's reading: naive means UTC (the only zone it writes), and a time that
        # leaves years 1-9999 once moved to UTC is an error, not an OverflowError.
        return to_utc(value)
    except (ValueError, OverflowError):
        raise ScheduleRecordError(
            "field 'at' is not an ISO-8601 time within years 1-9999 in UTC"
        ) from None


def parse_schedule_record(value: bytes | None) -> TimerEntry:
    """Parse one record value (``{"session_id","key","at","replaces"}``) or raise why not.

    ``replaces`` names an earlier timer the entry supersedes; the store deletes it in the same
    transaction that sets this one. Raises only ``ScheduleRecordError``, whatever ``value`` is.
    """
    if not value:
        raise ScheduleRecordError("record has no value", reason="empty")
    try:
        body = json.loads(value)
    except (ValueError, RecursionError):
        raise ScheduleRecordError("record value is not JSON", reason="not-json") from None
    if not isinstance(body, dict):
        raise ScheduleRecordError("record value is not a JSON object", reason="not-an-object")
    replaces = body.get("replaces")
    if replaces is not None:
        if not isinstance(replaces, str) or not replaces:
            raise ScheduleRecordError("field 'replaces' must be a non-empty string or null")
        problem = _text_problem(replaces)
        if problem is not None:
            raise ScheduleRecordError(f"field 'replaces' {problem}", reason="invalid-text")
    return TimerEntry(
        session_id=_required_text(body, "session_id"),
        key=_required_text(body, "key"),
        at=_parse_at(body.get("at")),
        replaces=replaces,
    )


def _refused(partition: TopicPartition, offset: int, reason: str, detail: str) -> None:
    metrics.SCHEDULE_REFUSED.labels(reason=reason).inc()
    log.warning(
        "schedule record refused",
        extra={
            "topic": partition.topic,
            "partition": partition.partition,
            "offset": offset,
            "reason": reason,
            "error": detail,
        },
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
        group: str | None = None,
    ) -> None:
        self._consumer = consumer
        self._positions = (
            IntakePositions(cast(PositionedSink, sink), group, consumer) if group else None
        )
        self._topic = topic
        self._sink = sink
        self._on_stored = on_stored
        self._max_records = max_records
        self._poll_timeout_ms = int(poll_timeout * 1000)
        self._retry_delay = retry_delay
        self.healthy = False

    async def start(self) -> None:
        if self._positions is not None:
            self._consumer.subscribe([self._topic], listener=self._positions)
        else:
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
                await stopped_within(stop, self._retry_delay)

    async def step(self) -> int:
        """Fetch, store and commit one batch; returns how many entries were stored."""
        fetched = await self._consumer.getmany(
            timeout_ms=self._poll_timeout_ms, max_records=self._max_records
        )
        if not fetched:
            return 0
        entries: list[tuple[TopicPartition, int, TimerEntry]] = []
        offsets: dict[TopicPartition, int] = {}
        for partition, records in fetched.items():
            for record in records:
                try:
                    entry = parse_schedule_record(record.value)
                    context = tracing.record_context(record)
                    if context is not None:
                        entry = dataclasses.replace(
                            entry, traceparent=context[0], tracestate=context[1]
                        )
                    entries.append((partition, record.offset, entry))
                except ScheduleRecordError as exc:
                    _refused(partition, record.offset, exc.reason, str(exc))
                offsets[partition] = record.offset + 1
        stored: list[TimerEntry] = []
        update = self._positions.update(offsets) if self._positions is not None else None
        if entries or update is not None:
            try:
                stored = await self._store(entries, update)
            except PositionsMoved as moved:
                for partition in fetched:
                    with contextlib.suppress(IllegalStateError):
                        self._consumer.seek(partition, fetched[partition][0].offset)
                assert self._positions is not None
                self._positions.moved(moved)
                return 0
            except Exception:
                # Not stored: rewind so the same records are fetched again, in order. A
                # partition revoked meanwhile cannot be rewound; its new owner starts from the
                # last commit anyway.
                for partition in fetched:
                    with contextlib.suppress(IllegalStateError):
                        self._consumer.seek(partition, fetched[partition][0].offset)
                raise
            for entry in stored:
                action = "replace" if entry.replaces else "upsert"
                metrics.TIMERS_SCHEDULED.labels(action=action).inc()
            if update is not None and self._positions is not None:
                self._positions.written(update)
            if stored:
                self._on_stored()
        try:
            await self._consumer.commit(offsets)
        except (CommitFailedError, KafkaError):
            # The group rebalanced under us; the new owner replays from the last commit, and
            # replaying stored entries is idempotent.
            log.warning("schedule offsets not committed; the batch will be replayed")
        return len(stored)

    async def _upsert(
        self, entries: Sequence[TimerEntry], update: PositionsUpdate | None
    ) -> None:
        if update is None:
            await self._sink.upsert_timers(entries)
        else:
            await cast(PositionedSink, self._sink).upsert_timers(entries, positions=update)

    async def _store(
        self, entries: list[tuple[TopicPartition, int, TimerEntry]],
        update: PositionsUpdate | None = None,
    ) -> list[TimerEntry]:
        """Write the batch in one call (with the positions it moves to, if any); when that
        fails for a reason no retry can fix, write it entry by entry, refuse only the entries
        that fail that way, then the positions. Returns the entries stored; raises what a
        retry may fix."""
        try:
            await self._upsert([entry for _, _, entry in entries], update)
            return [entry for _, _, entry in entries]
        except Exception as exc:
            if cannot_succeed(exc) is None:
                raise
        stored: list[TimerEntry] = []
        for partition, offset, entry in entries:
            try:
                await self._sink.upsert_timers([entry])
            except Exception as exc:
                reason = cannot_succeed(exc)
                if reason is None:
                    raise
                _refused(partition, offset, reason, describe(exc))
                continue
            stored.append(entry)
        if update is not None:
            await self._upsert([], update)
        return stored

