"""The dead-letter path: a record the parser refused, or an input whose turn failed for good,
sent to the DLQ while its partition is owned, then its offset released.

Only the broker can fail the send and only the database the store; whatever they raise, the
record is retried with a growing delay and is not released unless it reached the DLQ (and, for
an input of a conversation, its source was stored as dead-lettered). A partition that moves, or
a stop, ends the retries: the offset then stays, and the next owner replays the record.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from aiokafka.structs import ConsumerRecord, TopicPartition

from consumer import metrics, tracing
from consumer.dead_letters import RefusedRecords
from consumer.turns.commits import Commits
from consumer.turns.decisions import DeadLetter
from consumer.turns.ownership import Ownership
from consumer.turns.parser import Rejected
from consumer.turns.refused_words import printable, read_refused
from consumer.turns.runtime import Runtime
from store import DeadLetterWords, SourceRecord

__all__ = ["DeadLettering"]

log = logging.getLogger("turnflow.consumer")


def _dead_letter_words(record: ConsumerRecord[bytes, bytes], detail: str) -> DeadLetterWords:
    """What a dead-lettered record says about its customer, kept for the inspector."""
    words = read_refused(record.key, record.value)
    return DeadLetterWords(
        message=words.message, input_id=words.input_id, key=words.key,
        detail=printable(detail, 1000),
    )


class DeadLettering:
    """Sends records to the DLQ once, in order, while their partitions are owned."""

    def __init__(
        self,
        runtime: Runtime,
        ownership: Ownership,
        commits: Commits,
    ) -> None:
        self._runtime = runtime
        self._ownership = ownership
        self._commits = commits
        self.refused = RefusedRecords()

    async def refused_then_done(
        self,
        tp: TopicPartition,
        record: ConsumerRecord[bytes, bytes],
        epoch: int,
        why: Rejected,
    ) -> None:
        """A record the parser refused goes to the DLQ once, in its partition's order
        (``RefusedRecords``): on a reread of the partition (a new group id, lost offsets, a
        crash before the commit) its stored source is found and it is skipped, not sent
        again. Its source is stored under the session id the record names when it is usable,
        else under ``""``."""
        async with self.refused.lane(tp):
            found: list[bool] = []

            async def look_up() -> None:
                found.append(
                    await self.refused.sent_before(self._runtime.store, tp, record.offset)
                )

            if not await self._while_owned(
                tp, epoch, look_up, "looking up a refused record failed; retrying"
            ):
                return
            if found[-1]:
                metrics.REPLAYS_SKIPPED.inc()
                log.info(
                    "refused record already sent to the DLQ; skipped",
                    extra={"reason": why.reason, "partition": tp.partition,
                           "offset": record.offset},
                )
                self._commits.done(tp, record.offset, epoch)
                return
            # Stored under the session it names when it names a usable one (a bad ``at``, a
            # wrong key), so its conversation's page and list show it; else under "".
            named = read_refused(record.key, record.value).session_id
            # A span of its own, failed with the reason: the dead letter carries its context.
            with tracing.process_span([record], group=self._runtime.settings.group_id,
                                      conversation_id=named or ""):
                tracing.fail_turn(why.reason)
                await self.dead_letter_then_done(tp, record, epoch, why, session_id=named or "")
            self.refused.sent(tp, record.offset)

    async def dead_letter_then_done(
        self,
        tp: TopicPartition,
        record: ConsumerRecord[bytes, bytes],
        epoch: int,
        why: Rejected | DeadLetter,
        *,
        session_id: str | None = None,
    ) -> None:
        """Send the original record to the DLQ (retrying the broker), then release its offset.

        With ``session_id`` (an input's conversation, ``""`` for a record the parser refused),
        the record's source is then stored as dead-lettered before the offset is released: a replay
        after a crash finds it there and skips it, as it skips a record in the turn log, instead
        of answering it late, after the inputs behind it, or dead-lettering it twice. In that
        order: stored first and lost before the send, the record would never reach the DLQ."""
        # Only the broker can fail the send, and only the database the store; whatever they
        # raise, the record is not released unless it reached the DLQ (and, for an input of a
        # conversation, its source was stored).
        if not await self._while_owned(
            tp, epoch, partial(self.send, record, why.reason, why.detail),
            "DLQ publish failed; retrying",
        ):
            return
        metrics.DLQ.labels(reason=why.reason).inc()
        if session_id is not None:
            source = SourceRecord(tp.topic, tp.partition, record.offset)
            store = self._runtime.store
            if not await self._while_owned(
                tp, epoch,
                partial(store.record_dead_lettered, session_id, [source], why.reason,
                        words=_dead_letter_words(record, why.detail)),
                "storing a dead-lettered source failed; retrying", session_id=session_id,
            ):
                return
        self._commits.done(tp, record.offset, epoch)

    async def _while_owned(
        self,
        tp: TopicPartition,
        epoch: int,
        work: Callable[[], Awaitable[Any]],
        failed: str,
        **ids: str,
    ) -> bool:
        """Run ``work`` until it succeeds, backing off after each failure (logged as ``failed``,
        with ``ids``), while ``tp`` is owned; False when the partition moved or the service
        stops first (the offset then stays, and the record is replayed)."""
        attempt = 1
        while self._ownership.owns(tp, epoch):
            try:
                with self._ownership.busy_on(tp):
                    await work()
            except Exception as exc:
                delay = self._runtime.policy.delay(attempt)
                log.warning(
                    failed, extra={"error": type(exc).__name__, "delay_s": delay} | ids
                )
                if not await self._runtime.sleep(delay):
                    return False
                attempt += 1
                continue
            return True
        return False

    async def send(self, record: ConsumerRecord[bytes, bytes], reason: str, detail: str) -> None:
        """Publish ``record`` to the DLQ topic (or keep it in the database when too large)."""
        kept = await self._runtime.dead_letters.publish(record, reason, detail)
        if kept is not None:
            log.warning(
                "record too large for the DLQ topic; kept in the dead_letters table",
                extra={"reason": reason, "partition": record.partition,
                       "offset": record.offset, "kept_id": kept},
            )
