"""``consume`` and ``schedule`` as processes while their broker goes away: ``/readyz`` turns 503
within seconds of the broker dying, and SIGTERM in the middle of the outage still drains and
exits 0 without a traceback."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from consumer.devchat.embedded_broker import EmbeddedBroker
from consumer.errors import EmbeddedBrokerError
from consumer.processes import free_port
from consumer.topics import TopicSpec, ensure_topics
from tests.fixtures.servers import servers_unavailable

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TURNFLOW = str(Path(sys.executable).with_name("turnflow"))
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
async def own_broker() -> AsyncIterator[EmbeddedBroker]:
    """A broker of this test alone, so killing it disturbs no other test."""
    broker = EmbeddedBroker(free_port())
    try:
        await asyncio.to_thread(broker.start)
    except EmbeddedBrokerError as exc:
        servers_unavailable(f"the dedicated embedded broker did not start: {exc}")
    try:
        yield broker
    finally:
        await asyncio.to_thread(broker.stop)


async def _wait_for_line(process: asyncio.subprocess.Process, text: str, logs: list[str]) -> None:
    assert process.stderr is not None
    async with asyncio.timeout(40):
        while not any(text in line for line in logs):
            line = (await process.stderr.readline()).decode()
            assert line, f"process exited early: {logs}"
            logs.append(line)


async def _status(port: int) -> int:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
        return (await client.get("/readyz")).status_code


async def _until_status(port: int, wanted: int, within_s: float) -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    while (await _status(port)) != wanted:
        assert loop.time() - start < within_s, f"/readyz on {port} never answered {wanted}"
        await asyncio.sleep(0.25)
    return loop.time() - start


async def test_readiness_follows_the_broker_and_sigterm_in_an_outage_exits_zero(
    own_broker: EmbeddedBroker, database_url: str
) -> None:
    """Both services are ready, answer 503 within 15 s of the broker being killed, and exit 0
    on SIGTERM during the outage with no traceback and no unclosed client."""
    suffix = uuid.uuid4().hex[:8]
    bootstrap = own_broker.bootstrap_servers
    ports = {"consume": free_port(), "schedule": free_port()}
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": str(REPO),
        "DATABASE_URL": database_url,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "INBOUND_TOPIC": f"in.health.{suffix}",
        "MESSAGES_TOPIC": f"out.health.{suffix}",
        "SCHEDULE_TOPIC": f"sched.health.{suffix}",
        "DLQ_TOPIC": f"dlq.health.{suffix}",
        "GROUP_ID": f"health-{suffix}",
        "METRICS_HOST": "127.0.0.1",
        "HEARTBEAT_INTERVAL_MS": "500",
        "SESSION_TIMEOUT_MS": "6000",
        "DRAIN_TIMEOUT_MS": "2000",
        "KAFKA_IDEMPOTENT_PRODUCER": "false",
    })
    await ensure_topics(bootstrap, [TopicSpec(env[k], 1) for k in (
        "INBOUND_TOPIC", "MESSAGES_TOPIC", "SCHEDULE_TOPIC", "DLQ_TOPIC")])
    consume = await asyncio.create_subprocess_exec(
        TURNFLOW, "consume", "--workers", "1",
        "--agent", "tests.integration.harness:counting_agent",
        env={**env, "METRICS_PORT": str(ports["consume"])}, stderr=asyncio.subprocess.PIPE,
    )
    schedule = await asyncio.create_subprocess_exec(
        TURNFLOW, "schedule", env={**env, "METRICS_PORT": str(ports["schedule"])},
        stderr=asyncio.subprocess.PIPE,
    )
    logs: dict[str, list[str]] = {"consume": [], "schedule": []}
    try:
        await _wait_for_line(consume, '"consumer ready"', logs["consume"])
        await _wait_for_line(schedule, '"scheduler ready"', logs["schedule"])
        for port in ports.values():
            await _until_status(port, 200, within_s=10)

        await asyncio.to_thread(own_broker.kill)
        await asyncio.gather(*(_until_status(port, 503, within_s=15) for port in ports.values()))

        for process, name in ((consume, "consume"), (schedule, "schedule")):
            process.send_signal(signal.SIGTERM)
            assert process.stderr is not None
            rest = await asyncio.wait_for(process.stderr.read(), timeout=45)
            logs[name].extend(rest.decode().splitlines())
            code = await asyncio.wait_for(process.wait(), timeout=10)
            assert code == 0, "\n".join(logs[name][-40:])
    finally:
        for process in (consume, schedule):
            if process.returncode is None:
                process.kill()
                await process.wait()
    for name, lines in logs.items():
        text = "\n".join(lines)
        assert "Traceback" not in text, f"{name}: {text[-3000:]}"
        assert "Unclosed" not in text, f"{name}: {text[-3000:]}"
    assert any('"consumer stopped"' in line for line in logs["consume"])
    assert any('"scheduler stopped"' in line for line in logs["schedule"])



async def _run(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        TURNFLOW, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_topics_says_created_or_found_with_partition_counts(
    own_broker: EmbeddedBroker,
) -> None:
    """``turnflow topics`` reports each topic as created (with its partitions, replication
    factor and min.insync.replicas) or found, and says how an existing topic differs from the
    settings without altering it."""
    suffix = uuid.uuid4().hex[:8]
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": own_broker.bootstrap_servers,
           "INBOUND_TOPIC": f"in.t.{suffix}", "MESSAGES_TOPIC": f"out.t.{suffix}",
           "SCHEDULE_TOPIC": f"sched.t.{suffix}", "DLQ_TOPIC": f"dlq.t.{suffix}",
           "TOPIC_PARTITIONS": "3"}
    code, first, err = await _run(["topics"], env)
    assert code == 0, err
    assert first.splitlines() == [
        f"topic {env[k]}: created with 3 partitions, replication factor 1"
        for k in ("INBOUND_TOPIC", "MESSAGES_TOPIC", "SCHEDULE_TOPIC", "DLQ_TOPIC")
    ]
    code, again, err = await _run(["topics"], env)
    assert code == 0, err
    assert f"topic {env['INBOUND_TOPIC']}: found, 3 partitions" in again.splitlines()
    code, more, err = await _run(["topics", "--partitions", "5"], env)
    assert code == 0, err
    assert (f"topic {env['DLQ_TOPIC']}: found, left as it is though it differs from the "
            "settings: 3 partitions (5 asked for)") in more.splitlines()


@pytest.mark.parametrize("command", [["schedule"], ["consume", "--agent",
                                                     "tests.integration.harness:counting_agent"]])
async def test_a_broker_without_producer_ids_gets_a_hint(
    command: list[str], own_broker: EmbeddedBroker, database_url: str
) -> None:
    """Against a broker that hands out no producer ids (the embedded one), an idempotent
    producer stops the service with one line saying to set KAFKA_IDEMPOTENT_PRODUCER=false."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "DATABASE_URL": database_url,
           "KAFKA_BOOTSTRAP_SERVERS": own_broker.bootstrap_servers, "METRICS_PORT": "0",
           "KAFKA_IDEMPOTENT_PRODUCER": "true", "LOG_LEVEL": "ERROR",
           "GROUP_ID": f"pid-{uuid.uuid4().hex[:8]}"}
    code, _out, err = await _run(command, env)
    lines = [line for line in err.splitlines() if line.startswith("turnflow:")]
    assert code == 1, err
    assert len(lines) == 1 and "KAFKA_IDEMPOTENT_PRODUCER=false" in lines[0], err
    assert "Traceback" not in err


async def test_the_broker_command_serves_until_sigterm() -> None:
    """``turnflow broker`` starts the embedded broker alone, prints the settings the other
    processes need, serves topic creation, and exits 0 on SIGTERM."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        TURNFLOW, "broker", "--port", str(port),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    try:
        seen: list[str] = []
        async with asyncio.timeout(30):
            while not any("SIGTERM stops it" in line for line in seen):
                line = (await process.stdout.readline()).decode()
                if not line:
                    servers_unavailable(f"turnflow broker exited: {seen}")
                seen.append(line)
        assert f"  KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:{port}\n" in seen
        assert any(line.startswith("  KAFKA_IDEMPOTENT_PRODUCER=false") for line in seen)
        reports = await ensure_topics(f"127.0.0.1:{port}", [TopicSpec("trial", 2)])
        assert [(r.created, r.partitions) for r in reports] == [(True, 2)]
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), timeout=15) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
