"""``turnflow schedule`` as a process: ready line, health endpoints, a wake, SIGTERM exit 0,
and a SIGKILL in the middle of a burst that loses no timer."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from consumer.devchat.embedded_broker import free_port
from store import Store, TimerEntry
from tests.fixtures.broker import TopicFactory

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TURNFLOW = str(Path(sys.executable).with_name("turnflow"))


async def read_until(stream: asyncio.StreamReader, needle: str, seen: list[str]) -> None:
    """Collect stderr lines until one contains ``needle`` (bounded by the caller)."""
    while True:
        line = await stream.readline()
        if not line:
            raise AssertionError(f"process ended before {needle!r}; stderr: {seen}")
        seen.append(line.decode(errors="replace").rstrip())
        if needle in seen[-1]:
            return


async def test_schedule_command_serves_fires_and_exits_zero_on_sigterm(
    store: Store, database_url: str, kafka_bootstrap: str, kafka_topics: TopicFactory,
    kafka_is_embedded: bool,
) -> None:
    """The command logs ready, answers /healthz and /readyz, fires a wake, and exits 0."""
    topics = await kafka_topics("outbound.schedule", "inbound.turns", partitions=2)
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "SCHEDULE_TOPIC": topics["outbound.schedule"],
        "INBOUND_TOPIC": topics["inbound.turns"],
        "GROUP_ID": f"cli-{uuid.uuid4().hex[:8]}",
        "METRICS_HOST": "127.0.0.1",
        "METRICS_PORT": str(port),
        # The embedded broker has no producer ids, so no idempotent producer there.
        "KAFKA_IDEMPOTENT_PRODUCER": "false" if kafka_is_embedded else "true",
    }
    process = await asyncio.create_subprocess_exec(
        TURNFLOW, "schedule", "--max-idle", "1",
        env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    stderr: list[str] = []
    try:
        async with asyncio.timeout(60):
            await read_until(process.stderr, "scheduler ready", stderr)
        assert json.loads(stderr[-1])["port"] == port

        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        await producer.start()
        try:
            at = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
            entry = {"session_id": "cli-1", "key": "cli-wake", "at": at, "replaces": None}
            await producer.send_and_wait(
                topics["outbound.schedule"], json.dumps(entry).encode(), key=b"cli-1"
            )
        finally:
            await producer.stop()

        reader = AIOKafkaConsumer(
            topics["inbound.turns"], bootstrap_servers=kafka_bootstrap,
            group_id=None, auto_offset_reset="earliest",
        )
        await reader.start()
        try:
            async with asyncio.timeout(60):
                record = await reader.getone()
        finally:
            await reader.stop()
        assert record.value is not None
        assert json.loads(record.value) == {"session_id": "cli-1", "wake": "cli-wake"}

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            assert (await http.get("/healthz")).status_code == 200
            async with asyncio.timeout(30):
                # Probing /readyz until it says ready is exactly what a kubelet does.
                while (await http.get("/readyz")).status_code != 200:  # noqa: ASYNC110
                    await asyncio.sleep(0.1)
            scraped = (await http.get("/metrics")).text
        assert "turnflow_timers_pending" in scraped
        assert "turnflow_wakes_emitted_total 1.0" in scraped
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            code = await process.wait()
            stderr.extend(
                line.rstrip() for line in (await process.stderr.read()).decode().splitlines()
            )
    assert code == 0, stderr
    assert any("scheduler stopped" in line for line in stderr)
    assert await store.timers_pending() == 0


def process_env(
    database_url: str, bootstrap: str, topics: dict[str, str], group_id: str, embedded: bool
) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SCHEDULE_TOPIC": topics["outbound.schedule"],
        "INBOUND_TOPIC": topics["inbound.turns"],
        "GROUP_ID": group_id,
        "METRICS_PORT": "0",
        "KAFKA_IDEMPOTENT_PRODUCER": "false" if embedded else "true",
        # A killed member holds its partitions until its session times out; keep that short.
        "SESSION_TIMEOUT_MS": "3000",
        "HEARTBEAT_INTERVAL_MS": "500",
    }


async def start_ready(env: dict[str, str], *args: str) -> tuple[asyncio.subprocess.Process,
                                                                 asyncio.Task[None]]:
    """Start ``turnflow schedule``, wait for its ready line, then keep draining its stderr."""
    process = await asyncio.create_subprocess_exec(
        TURNFLOW, "schedule", *args,
        env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    stream = process.stderr
    seen: list[str] = []
    async with asyncio.timeout(60):
        await read_until(stream, "scheduler ready", seen)

    async def drain() -> None:
        while await stream.readline():
            pass

    return process, asyncio.create_task(drain())


async def test_sigkill_mid_burst_loses_no_timer(
    store: Store, database_url: str, kafka_bootstrap: str, kafka_topics: TopicFactory,
    kafka_is_embedded: bool,
) -> None:
    """A scheduler killed while firing a burst leaves its claimed rows to the next one: every
    timer fires, and only the batches in flight at the kill may fire twice."""
    topics = await kafka_topics("outbound.schedule", "inbound.turns", partitions=2)
    env = process_env(
        database_url, kafka_bootstrap, topics, f"kill-{uuid.uuid4().hex[:8]}", kafka_is_embedded
    )
    batch = ("--batch-size", "20")
    count = 2000
    keys = {f"burst-{i}" for i in range(count)}
    process, draining = await start_ready(env, *batch)
    try:
        due = datetime.now(UTC) + timedelta(seconds=0.5)
        await store.upsert_timers([
            TimerEntry(key=f"burst-{i}", session_id=f"s-{i % 40}", at=due) for i in range(count)
        ])
        reader = AIOKafkaConsumer(
            topics["inbound.turns"], bootstrap_servers=kafka_bootstrap,
            group_id=None, auto_offset_reset="earliest",
        )
        await reader.start()
        try:
            async with asyncio.timeout(60):
                first = await reader.getone()
            process.kill()
            await process.wait()
            left = await store.timers_pending()
            assert left > 0, "the kill must land before the burst is done"

            second, second_draining = await start_ready(env, *batch)
            try:
                async with asyncio.timeout(60):
                    while await store.timers_pending():  # noqa: ASYNC110 - the table is the signal
                        await asyncio.sleep(0.1)
            finally:
                second.send_signal(signal.SIGTERM)
                async with asyncio.timeout(30):
                    assert await second.wait() == 0
                await second_draining

            assert first.value is not None
            fired = [json.loads(first.value)["wake"]]
            async with asyncio.timeout(60):
                while len(set(fired)) < count:
                    for records in (await reader.getmany(timeout_ms=500)).values():
                        fired.extend(json.loads(r.value)["wake"] for r in records)
        finally:
            await reader.stop()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await draining
    assert set(fired) == keys
    # Rows claimed by the killed process whose wakes were already out fire again.
    assert len(fired) - count <= 2 * 20
