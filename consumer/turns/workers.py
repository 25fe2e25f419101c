"""Per-conversation workers: one task for each conversation with queued inputs.

Valid inputs join their conversation's queue (``SessionQueues``). Each conversation with work
has one worker task that takes its inputs strictly in offset order; workers of different
conversations (even in one partition) run concurrently, so a slow conversation never holds up
another one.

Bursts. When a worker takes a message and more messages of that conversation already wait
behind it (``MERGE_BURSTS``, optionally after ``BURST_WINDOW_MS`` of quiet), it takes them too
and the pipeline answers them as one turn; their offsets are released together, after the
turn's save and publish, so a crash before then replays all of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from aiokafka.structs import ConsumerRecord, TopicPartition

from consumer.turns.pipeline import TurnWork
from consumer.turns.runtime import Runtime
from consumer.turns.session_queues import QueuedInput, SessionQueues
from consumer.turns.tasks import log_crash

__all__ = ["Entry", "FetchedInput", "SessionWorkers"]


@dataclass(frozen=True)
class FetchedInput:
    """A queued input: the pipeline's work, the raw record (for the DLQ), its epoch."""

    work: TurnWork
    record: ConsumerRecord[bytes, bytes]
    epoch: int


Entry = QueuedInput[TopicPartition, FetchedInput]


class SessionWorkers:
    """The conversations' queues and their worker tasks; ``process`` runs one turn for the
    input (or the burst of messages) a worker took."""

    def __init__(
        self,
        runtime: Runtime,
        process: Callable[..., Awaitable[None]],
    ) -> None:
        self._runtime = runtime
        self._process = process
        self.queues: SessionQueues[TopicPartition, FetchedInput] = SessionQueues()
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def enqueue(self, entry: Entry) -> None:
        """Queue ``entry`` behind its conversation's inputs; start the conversation's worker
        when it had none."""
        if self.queues.enqueue(entry):
            session_id = entry.session_id
            worker = asyncio.create_task(
                self._session_worker(session_id), name=f"session-{session_id}"
            )
            worker.add_done_callback(log_crash)
            self.tasks[session_id] = worker

    def drop_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        """Inputs of ``partitions`` that no worker has taken yet are never taken."""
        self.queues.drop_partitions(partitions)

    async def _session_worker(self, session_id: str) -> None:
        try:
            while (entry := self.queues.take(session_id)) is not None:
                await self._process(*await self._with_burst(entry))
        finally:
            self.tasks.pop(session_id, None)
            if self.queues.is_active(session_id):
                # Cancelled with inputs still queued: they were fenced; forget them so a later
                # assignment starts this session afresh.
                self.queues.discard_session(session_id)

    async def _with_burst(self, entry: Entry) -> list[Entry]:
        """The input taken and, when it is a message, the messages of its session waiting
        right behind it (after the quiet period, if one is set): they are answered as one
        turn. Wakes, events and starts never wait and never join a burst, and neither does a
        message whose ``context`` or ``silenced`` differs from the first's: one turn has one
        of each, so a message the host silenced is never answered because a plain one came
        after it, nor a plain one left unanswered because a silenced one did."""
        settings = self._runtime.settings
        if not settings.merge_bursts or entry.item.work.parsed.kind != "message":
            return [entry]
        if settings.burst_window_ms > 0:
            await self._runtime.sleep(settings.burst_window_ms / 1000)
        tp, epoch = entry.partition, entry.item.epoch
        first = entry.item.work.parsed.request

        def joins(waiting: Entry) -> bool:
            request = waiting.item.work.parsed.request
            return (
                waiting.item.work.parsed.kind == "message"
                and waiting.partition == tp
                and waiting.item.epoch == epoch
                and request.get("context") == first.get("context")
                and request.get("silenced") == first.get("silenced")
            )

        following = self.queues.take_following(
            entry.session_id, joins, settings.burst_max_messages - 1
        )
        return [entry, *following]
