"""A consumer process under a low descriptor limit, for test_hostile_http: it serves its
health port (printing the port), waits for ``go`` on stdin while the test holds hundreds of
slow connections on that port, then runs turns of many conversations through the real
``ConsumerService`` on a real database pool, and prints one JSON line: the replies each
conversation got, the replies expected, and the most connections the port held.

    python tests/consumer/slow_clients_process.py DATABASE_URL SOFT_NOFILE_LIMIT
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from aiokafka.structs import TopicPartition

from consumer.health import HealthServer
from store import Store
from tests.consumer.fakes import FakeKafkaConsumer
from tests.turns.test_service_bursts import (
    DlqProducer,
    EchoAgent,
    message,
    replies,
    service_on,
)

SESSIONS = 30
MESSAGES = 3


async def main(database_url: str) -> None:
    health = await HealthServer(host="127.0.0.1", port=0, ready=lambda: True).start()
    print(health.port, flush=True)
    await asyncio.to_thread(sys.stdin.readline)  # the test holds its slow clients meanwhile
    run = uuid.uuid4().hex[:8]
    partitions = [TopicPartition(f"slow-{run}", p) for p in range(3)]
    sessions = [f"slow-{run}-{n}" for n in range(SESSIONS)]
    consumer = FakeKafkaConsumer(partitions)
    for m in range(MESSAGES):
        for n, session in enumerate(sessions):
            consumer.append(partitions[n % 3], *message(session, f"m{m}"))
    store = await Store.connect(database_url, pool_size=10, max_overflow=10)
    try:
        producer = DlqProducer()
        service = service_on(consumer, EchoAgent(), producer, store,  # type: ignore[arg-type]
                             merge_bursts=False, max_in_flight=32)
        loop = asyncio.create_task(service.parts.intake.fetch_loop())
        try:
            async with asyncio.timeout(90):
                # The fake consumer's commits are the service's own progress.
                while not all(  # noqa: ASYNC110
                    consumer.committed(tp) == SESSIONS // 3 * MESSAGES for tp in partitions
                ):
                    await asyncio.sleep(0.05)
        finally:
            service.stop()
            await loop
            await service.parts.runtime.pipeline.close()
    finally:
        await store.close()
        await health.stop()
    print(json.dumps({
        "replies": {s: replies(producer, s) for s in sessions},
        "expected": {s: [f"m{m}" for m in range(MESSAGES)] for s in sessions},
        "peak_connections": health.http.peak_connections,
    }), flush=True)


if __name__ == "__main__":
    soft = int(sys.argv[2])
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    asyncio.run(main(sys.argv[1]))
