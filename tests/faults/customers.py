"""Customers who wait for the answer before they write again, as people on a chat do.

Each customer sends ``m0``, waits until a reply answering it reaches them, then sends ``m1``,
and so on. What reaches them is what a delivery worker that dedupes on ``key`` passes on: the
first record under each key; a later record under a key already delivered is dropped, whatever
it says. So if a re-run answered a message under a key an earlier reply had used, the customer
never sees that answer and stops there, as a real one would.

Their messages carry no ``context`` of their own, so the consumer may merge the ones it finds
waiting together (``MERGE_BURSTS``, on by default): after a lost turn, a message re-read with
the customer's next one behind it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer

from engine import session_of
from tests.faults.process import MESSAGES, FaultSetup


@dataclass
class Customers:
    """``sessions`` customers, each writing ``messages`` messages one reply at a time."""

    setup: FaultSetup
    sessions: list[str]
    messages: int
    sent: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    delivered: dict[str, dict[str, Any]] = field(default_factory=dict)
    copies: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    answered: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, *, within: float) -> None:
        """Every customer writes all their messages; fails, naming who waits on what, when one
        is still waiting for an answer after ``within`` seconds."""
        reader = AIOKafkaConsumer(
            self.setup.topics[MESSAGES], bootstrap_servers=self.setup.bootstrap,
            auto_offset_reset="earliest", enable_auto_commit=False, group_id=None,
        )
        await reader.start()
        reading = asyncio.create_task(self._read(reader))
        try:
            async with asyncio.timeout(within):
                await asyncio.gather(*(self._write(sid) for sid in self.sessions))
        except TimeoutError:
            waiting = [f"{sid} waits on m{len(self.sent[sid]) - 1}" for sid in self.sessions
                       if self.sent[sid] and self.sent[sid][-1] not in self.answered[sid]]
            raise AssertionError(f"customers still waiting after {within}s: {waiting}, "
                                 f"{self.problems()[:5]}") from None
        finally:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
            await reader.stop()

    def progress(self) -> int:
        """Messages answered so far, over every customer."""
        return sum(len(ids) for ids in self.answered.values())

    async def _write(self, session_id: str) -> None:
        for j in range(self.messages):
            body = {"session_id": session_id, "message": f"m{j}",
                    "id": f"wamid.{uuid.uuid4().hex[:12]}"}
            self.sent[session_id].append(body["id"])
            await self.setup.produce([body])
            while body["id"] not in self.answered[session_id]:
                self._changed.clear()
                await self._changed.wait()

    async def _read(self, reader: AIOKafkaConsumer) -> None:
        while True:
            batch = await reader.getmany(timeout_ms=100)
            for records in batch.values():
                for record in records:
                    self._receive(json.loads(record.value))
            self._changed.set()

    def _receive(self, reply: dict[str, Any]) -> None:
        key = reply["key"]
        self.copies[key].add(reply["text"])
        if key in self.delivered:
            return  # a delivery worker drops it: the key was delivered already
        self.delivered[key] = reply
        if reply.get("input_id"):
            self.answered[reply["session_id"]].add(reply["input_id"])

    def problems(self) -> list[str]:
        """What a customer would see wrong: a key sent with two texts, a message with no reply
        under a key of its own, a key that reached another conversation."""
        found = [f"key {key} sent with {len(texts)} texts"
                 for key, texts in self.copies.items() if len(texts) > 1]
        for sid in self.sessions:
            found += [f"{sid}: {input_id} has no reply delivered"
                      for input_id in self.sent[sid] if input_id not in self.answered[sid]]
        found += [f"{key} delivered to {reply['session_id']}"
                  for key, reply in self.delivered.items()
                  if session_of(key) != reply["session_id"]]
        return found
