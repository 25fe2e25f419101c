"""Load for a consumer: inputs produced round-robin over sessions to its inbound topic, and its
replies read back, each input's first reply timestamped."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

__all__ = ["InputProducer", "Replies", "ReplyReader"]


class _TopicReader:
    """Reads a topic from its start in a task of its own, each record given to ``_take``."""

    POLL_MS = 200  # how long one fetch waits for records

    def __init__(self, bootstrap: str, topic: str) -> None:
        from aiokafka import AIOKafkaConsumer

        self._consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
            enable_auto_commit=False, max_partition_fetch_bytes=4 << 20,
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._consumer.start()
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while True:
            batches = await self._consumer.getmany(timeout_ms=self.POLL_MS, max_records=5000)
            for records in batches.values():
                for record in records:
                    self._take(record)

    def _take(self, record: Any) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._consumer.stop()


class ReplyReader(_TopicReader):
    """Reads ``outbound.messages`` and keeps, per input id, the first reply's timestamp."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(bootstrap, topic)
        self.first_reply_ms: dict[str, int] = {}
        self.bytes_read = 0  # keys and values of every reply record read

    def _take(self, record: Any) -> None:
        self.bytes_read += len(record.key or b"") + len(record.value or b"")
        input_id = json.loads(record.value).get("input_id")
        if input_id is not None:
            self.first_reply_ms.setdefault(input_id, record.timestamp)

    async def until(self, ids: set[str], within: float) -> None:
        deadline = time.monotonic() + within
        while not ids <= self.first_reply_ms.keys():
            if time.monotonic() > deadline:
                missing = len(ids - self.first_reply_ms.keys())
                raise TimeoutError(f"{missing} of {len(ids)} inputs unanswered after {within}s")
            await asyncio.sleep(0.1)


class InputProducer:
    """Produces bench inputs round-robin over the sessions; remembers each send timestamp."""

    def __init__(self, bootstrap: str, topic: str, sessions: list[str]) -> None:
        from aiokafka import AIOKafkaProducer

        self._producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        self._topic = topic
        self._sessions = sessions
        self._next = 0
        self.sent_ms: dict[str, int] = {}
        self.bytes_sent = 0  # keys and values of every input record sent

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    def _records(self, count: int) -> Iterator[tuple[str, bytes, bytes]]:
        for _ in range(count):
            session = self._sessions[self._next % len(self._sessions)]
            self._next += 1
            input_id = f"in.{self._next}.{uuid.uuid4().hex[:6]}"
            value = {"session_id": session, "message": f"mensagem {self._next}", "id": input_id}
            yield input_id, session.encode(), json.dumps(value).encode()

    async def send(self, count: int) -> set[str]:
        """Send ``count`` inputs, await every ack; their ids."""
        pending = []
        for input_id, key, value in self._records(count):
            self.bytes_sent += len(key) + len(value)
            pending.append((input_id, await self._producer.send(self._topic, value, key=key)))
        for input_id, ack in pending:
            self.sent_ms[input_id] = (await ack).timestamp
        return {input_id for input_id, _ in pending}

    async def paced(self, rate: float, seconds: float) -> set[str]:
        """Send at ``rate`` inputs/s for ``seconds`` (ticks of 20 ms); their ids."""
        ids: set[str] = set()
        started = time.monotonic()
        sent = 0
        while (elapsed := time.monotonic() - started) < seconds:
            due = int(rate * elapsed) + 1
            if due > sent:
                ids |= await self.send(due - sent)
                sent = due
            await asyncio.sleep(0.02)
        return ids


class Replies(_TopicReader):
    """Reads the reply topic: per input id, every reply's timestamp; per conversation, the
    input ids in the order their replies came."""

    POLL_MS = 100

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(bootstrap, topic)
        self.stamps: dict[str, list[int]] = defaultdict(list)
        self.order: dict[str, list[str]] = defaultdict(list)

    def _take(self, record: Any) -> None:
        reply = json.loads(record.value)
        input_id = reply.get("input_id")
        if input_id is None:
            return
        if not self.stamps[input_id]:
            self.order[reply["session_id"]].append(input_id)
        self.stamps[input_id].append(record.timestamp)

    def answered(self, input_id: str) -> bool:
        return bool(self.stamps.get(input_id))

    async def until(self, ids: set[str], within: float, at_least: int | None = None) -> None:
        """Wait until every one of ``ids`` is answered (or ``at_least`` of them)."""
        deadline = time.monotonic() + within
        wanted = len(ids) if at_least is None else min(at_least, len(ids))
        while sum(1 for i in ids if self.answered(i)) < wanted:
            if time.monotonic() > deadline:
                missing = sum(1 for i in ids if not self.answered(i))
                raise TimeoutError(f"{missing} of {len(ids)} inputs unanswered after {within}s")
            await asyncio.sleep(0.05)
