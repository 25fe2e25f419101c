"""One turn for a conversation's input (or burst), attempted until it is done: the retries, the
model's fallback answer and the way to the DLQ.

An attempt runs the pipeline (load, engine turn in a slot, save, publish) while the input's
partition is owned under the epoch it was fetched in. A failure is turned into a decision
(``consumer.turns.decisions``): retry this conversation after a delay, answer with the fallback
message when the model cannot answer in time, abandon, or send the input to the DLQ. The offsets
are released together once the turn is saved and published (or dead-lettered).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from dataclasses import dataclass
from functools import partial
from typing import Any

from consumer import metrics, tracing
from consumer.failures import database_read_only, describe
from consumer.turns.commits import Commits
from consumer.turns.dead_lettering import DeadLettering
from consumer.turns.decisions import (
    INFRASTRUCTURE,
    Abandon,
    Commit,
    DeadLetter,
    Fallback,
    Retry,
    decide,
)
from consumer.turns.ownership import Ownership
from consumer.turns.pipeline import TurnFenced, TurnWork, burst_of
from consumer.turns.runtime import Runtime
from consumer.turns.slots import TurnSlots
from consumer.turns.workers import Entry
from engine import ProviderError, UnusableReply

__all__ = ["TurnAttempts"]

log = logging.getLogger("turnflow.consumer")


@dataclass
class _ModelWait:
    """One input's wait on the model: since its first retryable provider failure (by the
    event loop's clock), and whether it counts in ``turnflow_model_waiting_conversations``."""

    since: float | None = None
    counted: bool = False


def _outage(error: BaseException | None) -> bool:
    """The model could not be reached (not: it answered with nothing usable)."""
    return (
        isinstance(error, ProviderError)
        and error.kind == "retryable"
        and not isinstance(error, UnusableReply)
    )


class TurnAttempts:
    """Runs the turns the conversations' workers take."""

    def __init__(
        self,
        runtime: Runtime,
        ownership: Ownership,
        commits: Commits,
        slots: TurnSlots,
        dead_lettering: DeadLettering,
    ) -> None:
        self._runtime = runtime
        self._ownership = ownership
        self._commits = commits
        self._slots = slots
        self._dead_lettering = dead_lettering

    async def process(self, *entries: Entry) -> None:
        """Run one turn for ``entries`` (one input, or a burst of one session's messages in
        offset order) and release their offsets together once it is saved and published."""
        work = burst_of([e.item.work for e in entries])
        ids = {"session_id": work.parsed.session_id, "input_id": work.parsed.input_id,
               "inputs": len(entries)}
        # How long this input has waited on the model; it counts in
        # ``turnflow_model_waiting_conversations`` from its first outage retry until it ends.
        # (try/finally rather than a generator context manager, here and in ``_attempts`` and
        # ``TurnSlots.take``: each of those costs a turn about 1.5 µs more.)
        waiting = _ModelWait()
        records = [e.item.record for e in entries]
        span = tracing.process_span(records, group=self._runtime.settings.group_id,
                                    conversation_id=work.parsed.session_id)
        try:
            with span:
                await self._attempts(entries, work, ids, waiting)
        finally:
            if waiting.counted:
                metrics.MODEL_WAITING.dec()

    async def _attempts(
        self, entries: tuple[Entry, ...], work: TurnWork, ids: dict[str, Any], waiting: _ModelWait
    ) -> None:
        first, last = entries[0], entries[-1]
        tp, item = first.partition, first.item
        ownership, slots = self._ownership, self._slots
        owns = ownership.owns
        loop = asyncio.get_running_loop()
        attempt = 1  # counts the attempts that failed otherwise than on an outage
        outages = 0  # attempts that failed on an outage: waited out, never counted
        failing_since: float | None = None  # the loop's time of this input's first failure
        while True:
            if not owns(tp, item.epoch):
                return
            error: BaseException | None = None
            slot = slots.slot()
            await slots.load(slot, work)  # a load permit, before it counts as work on ``tp``
            if not owns(tp, item.epoch):
                slot.give_back()
                return
            ownership.work_began(tp)  # for a revoke to wait for, as ``busy_on``
            try:
                try:
                    await self._runtime.pipeline.apply(
                        work,
                        may_publish=lambda: owns(tp, item.epoch),
                        before_turn=partial(slots.take, slot, tp, item.epoch, work),
                        after_turn=slot.give_back,
                    )
                except TurnFenced:
                    return  # the partition moved while this input waited for a slot
                except Exception as exc:
                    error = exc
            finally:
                ownership.work_ended(tp)
                slot.give_back()
            slots.note_backoff(error)
            if _outage(error) and waiting.since is None:
                waiting.since = loop.time()
            decision = decide(
                error,
                attempt=attempt,
                policy=self._runtime.policy,
                waited_s=0.0 if waiting.since is None else loop.time() - waiting.since,
                draw=random.random(),
                answerable=work.parsed.kind == "message" and work.fallback is None,
                outages=outages,
            )
            if error is not None and failing_since is None:
                failing_since = loop.time()
            if error is not None and failing_since is not None and not isinstance(
                decision, DeadLetter | Abandon
            ):
                # Kept with the turn that finally runs: the inspector shows the retries.
                failed = 1 + int((work.retries or {}).get("attempts", 0))
                work = dataclasses.replace(work, retries={
                    "attempts": failed,
                    "last_error": describe(error),
                    "waited_ms": int((loop.time() - failing_since) * 1000),
                })
            if isinstance(decision, Fallback | Retry):
                tracing.note_failed_attempt(decision.reason, error)
            if isinstance(decision, Fallback):
                # The model could not answer in time: the message is answered without it.
                metrics.MODEL_FALLBACKS.labels(reason=decision.reason).inc()
                log.warning(
                    "the model could not answer; sending the fallback message",
                    extra=ids | {"reason": decision.reason, "attempt": attempt,
                                 "error": type(error).__name__},
                )
                work = dataclasses.replace(work, fallback={
                    "reason": decision.reason,
                    "message": self._runtime.settings.model_fallback_message,
                })
                if waiting.counted:  # no longer waiting on the model
                    waiting.counted = False
                    metrics.MODEL_WAITING.dec()
                attempt = 1
                continue
            if isinstance(decision, Commit):
                for entry in entries:
                    self._commits.done(tp, entry.offset, item.epoch)
                return
            if isinstance(decision, Abandon):
                log.info("input abandoned", extra=ids | {"reason": decision.reason})
                return
            if isinstance(decision, DeadLetter):
                if len(entries) > 1:
                    # One bad message must not take the others with it: answer each alone,
                    # so only the one that fails on its own reaches the DLQ.
                    log.warning(
                        "burst failed; answering its messages one by one",
                        extra=ids | {"reason": decision.reason, "error": type(error).__name__},
                    )
                    for entry in entries:
                        await self.process(entry)
                    return
                log.warning(
                    "input sent to the DLQ",
                    extra=ids | {"reason": decision.reason, "attempt": attempt,
                                 "error": type(error).__name__,
                                 "cause": describe(error) if error else None},
                )
                metrics.TURN_OUTCOMES.labels(outcome="error").inc()
                tracing.fail_turn(decision.reason, error)
                await self._dead_lettering.dead_letter_then_done(
                    tp, last.item.record, item.epoch, decision, session_id=work.parsed.session_id
                )
                return
            assert isinstance(decision, Retry)
            metrics.INPUT_RETRIES.inc()
            if database_read_only(error):
                metrics.DATABASE_READ_ONLY.inc()
            if decision.reason == "provider-retryable" and not waiting.counted:
                waiting.counted = True
                metrics.MODEL_WAITING.inc()
            log.warning(
                "input failed; retrying this session after a delay",
                extra=ids | {"reason": decision.reason, "attempt": attempt,
                             "outages": outages, "delay_s": decision.delay_s,
                             "error": type(error).__name__,
                             "cause": describe(error) if error else None},
            )
            if not await self._runtime.sleep(decision.delay_s):
                return
            if decision.reason == INFRASTRUCTURE:
                outages += 1
            else:
                attempt += 1
