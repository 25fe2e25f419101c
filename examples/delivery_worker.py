"""A delivery worker example: ``outbound.messages`` in, each reply delivered once.

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/delivery_worker.py
    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/delivery_worker.py \\
        --post https://channel.example/send --dedupe-db delivered.sqlite3

What a real worker must do, and this one does:

- **Dedupe on ``key``.** The service publishes after it saves, so a crash between the publish
  and the offset commit republishes the same rows with the same ``key``. A key already delivered
  is skipped. A key is unique across conversations, so it is all the worker needs: two
  customers at the same step never share one. Keys are kept in SQLite (``--dedupe-db``; in
  memory by default), so a restarted worker still knows what it sent.
- **Honour ``after_ms``.** It is the pause after the previous message of the same turn (same
  ``session_id`` and ``input_id``), e.g. a short wait step before a say. The worker sleeps what
  is left of it since that previous message went out.
- **Commit after delivery.** Offsets are committed only once the message is printed or POSTed,
  so a crash re-delivers (and the dedupe table drops what already went out) instead of losing.

It reads one partition's records in order, which keeps each conversation's replies in order
(the service keys every record by session id).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer

Deliver = Callable[[dict[str, Any]], Awaitable[None]]


class DeliveredKeys:
    """The keys already delivered, in SQLite so that a restart keeps them."""

    def __init__(self, path: str = ":memory:") -> None:
        self._db = sqlite3.connect(path)
        self._db.execute("CREATE TABLE IF NOT EXISTS delivered (key TEXT PRIMARY KEY)")

    def seen(self, key: str) -> bool:
        row = self._db.execute("SELECT 1 FROM delivered WHERE key = ?", (key,)).fetchone()
        return row is not None

    def add(self, key: str) -> None:
        self._db.execute("INSERT OR IGNORE INTO delivered (key) VALUES (?)", (key,))
        self._db.commit()


class DeliveryWorker:
    """Turns outbound records into deliveries: dedupe, pace, deliver, remember."""

    def __init__(
        self,
        deliver: Deliver,
        keys: DeliveredKeys,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.deliver = deliver
        self.keys = keys
        self._sleep = sleep
        self._monotonic = monotonic
        # session id -> (input id of the last delivered message, when it went out)
        self._last: dict[str, tuple[str | None, float]] = {}

    async def handle(self, value: dict[str, Any]) -> bool:
        """Deliver one outbound message unless its key was delivered; True when delivered."""
        key = value.get("key")
        if not isinstance(key, str) or self.keys.seen(key):
            return False
        session_id = str(value.get("session_id"))
        after_ms = int(value.get("after_ms") or 0)
        previous = self._last.get(session_id)
        if after_ms and previous is not None and previous[0] == value.get("input_id"):
            remaining = after_ms / 1000 - (self._monotonic() - previous[1])
            if remaining > 0:
                await self._sleep(remaining)
        elif after_ms:
            await self._sleep(after_ms / 1000)
        await self.deliver(value)
        self.keys.add(key)
        self._last[session_id] = (value.get("input_id"), self._monotonic())
        return True


async def print_message(value: dict[str, Any]) -> None:
    print(f"[{value.get('session_id')}] {value.get('text')}", flush=True)


def post_to(url: str) -> Deliver:
    import httpx

    client = httpx.AsyncClient(timeout=10)

    async def post(value: dict[str, Any]) -> None:
        response = await client.post(url, json=value)
        response.raise_for_status()  # not delivered: no commit, the record comes back

    return post


async def run(bootstrap: str, topic: str, group: str, worker: DeliveryWorker) -> None:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    print(f"delivery worker reading {topic} at {bootstrap} (group {group})", flush=True)
    try:
        async for record in consumer:
            try:
                value = json.loads(record.value)
            except (TypeError, ValueError):
                value = None  # not ours to fix here; the service never writes such a record
            if isinstance(value, dict):
                await worker.handle(value)
            await consumer.commit()
    finally:
        await consumer.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    )
    parser.add_argument(
        "--topic", default=os.environ.get("MESSAGES_TOPIC", "outbound.messages")
    )
    parser.add_argument("--group", default="turnflow-delivery-example")
    parser.add_argument("--post", metavar="URL", help="POST each message here instead of printing")
    parser.add_argument("--dedupe-db", default=":memory:", help="SQLite file of delivered keys")
    args = parser.parse_args(argv)
    deliver = post_to(args.post) if args.post else print_message
    worker = DeliveryWorker(deliver, DeliveredKeys(args.dedupe_db))
    try:
        asyncio.run(run(args.bootstrap, args.topic, args.group, worker))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
