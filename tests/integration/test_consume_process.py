"""``turnflow topics``, ``migrate`` and ``consume`` as processes, the way operators run them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from consumer.devchat.embedded_broker import free_port
from consumer.topics import TopicSpec, ensure_topics
from store import OutboxEntry, SaveRequest, SourceRecord, Store, TurnRecord
from tests.integration.harness import (
    OutboundReader,
    message,
    produce,
    verbatim_texts,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

TURNFLOW = str(Path(sys.executable).with_name("turnflow"))
REPO = Path(__file__).resolve().parents[2]


def free_port_pair(host: str = "127.0.0.1") -> int:
    """A port free together with the next one (the two workers' metrics ports), taken below
    the kernel's ephemeral range: a port the kernel picks lies inside that range, where its
    neighbour can be handed to any outgoing connection before the second worker binds it."""
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        base = random.randrange(max(1025, low - 12000), low - 1)
        sockets = [socket.socket() for _ in range(2)]
        try:
            for offset, sock in enumerate(sockets):
                sock.bind((host, base + offset))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    return free_port(host)


def _service_env(
    label: str, suffix: str, port: int, bootstrap: str, database_url: str, embedded: bool,
    *, partitions: int,
) -> dict[str, str]:
    """The environment of a service process on this test's own topics, group and port."""
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": str(REPO),  # the agent lives in the test tree
        "DATABASE_URL": database_url,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "INBOUND_TOPIC": f"inbound.turns.{label}.{suffix}",
        "MESSAGES_TOPIC": f"outbound.messages.{label}.{suffix}",
        "SCHEDULE_TOPIC": f"outbound.schedule.{label}.{suffix}",
        "DLQ_TOPIC": f"inbound.turns.dlq.{label}.{suffix}",
        "TOPIC_PARTITIONS": str(partitions),
        "GROUP_ID": f"{label}-{suffix}",
        "METRICS_PORT": str(port),
        "METRICS_HOST": "127.0.0.1",
        "HEARTBEAT_INTERVAL_MS": "500",
        "SESSION_TIMEOUT_MS": "6000",
        "KAFKA_IDEMPOTENT_PRODUCER": "false" if embedded else "true",
    })
    return env


async def run(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        TURNFLOW, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_consume_process_serves_then_exits_zero_on_sigterm(
    kafka_bootstrap: str, database_url: str, kafka_is_embedded: bool
) -> None:
    """Topics and migrations are idempotent commands; ``consume`` logs one ready line, answers
    /readyz and /metrics, turns a message into a reply, keeps message text out of its logs,
    and exits 0 after SIGTERM."""
    suffix = uuid.uuid4().hex[:8]
    port = free_port()
    env = _service_env("proc", suffix, port, kafka_bootstrap, database_url, kafka_is_embedded,
                       partitions=2)
    for args in (["topics"], ["topics"], ["migrate"]):
        code, _out, err = await run(args, env)
        assert code == 0, err

    process = await asyncio.create_subprocess_exec(
        TURNFLOW, "consume", "--workers", "1",
        "--agent", "tests.integration.harness:counting_agent",
        env=env, stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    logs: list[str] = []
    try:
        async with asyncio.timeout(30):
            while not any('"consumer ready"' in line for line in logs):
                line = (await process.stderr.readline()).decode()
                assert line, f"consume exited early: {logs}"
                logs.append(line)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (await client.get("/readyz")).status_code == 200
            metrics = (await client.get("/metrics")).text
            assert "turnflow_in_flight_sessions" in metrics

        sid = f"proc-{suffix}"
        await produce(kafka_bootstrap, env["INBOUND_TOPIC"], [message(sid, "segredo do cliente")])
        async with OutboundReader(kafka_bootstrap, env["MESSAGES_TOPIC"]) as replies:
            values = await replies.until(lambda v: sid in verbatim_texts(v))
        assert verbatim_texts(values)[sid] == ["1:segredo do cliente"]
        process.send_signal(signal.SIGTERM)
        rest = await asyncio.wait_for(process.stderr.read(), timeout=30)
        logs.extend(rest.decode().splitlines())
        assert await asyncio.wait_for(process.wait(), timeout=30) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()

    parsed = [json.loads(line) for line in logs if line.strip().startswith("{")]
    assert any(p["message"] == "turn applied" and p.get("session_id") == sid for p in parsed)
    assert any(p["message"] == "consumer stopped" for p in parsed)
    assert not any("segredo" in line for line in logs)


async def test_relay_process_republishes_and_exits_zero_on_sigterm(
    kafka_bootstrap: str, database_url: str, kafka_is_embedded: bool
) -> None:
    """``turnflow relay`` publishes a row a dead consumer left unpublished, then exits 0 on
    SIGTERM."""
    suffix = uuid.uuid4().hex[:8]
    topic = f"outbound.messages.relay.{suffix}"
    await ensure_topics(kafka_bootstrap, [TopicSpec(topic, 1)])
    sid = f"relayproc-{suffix}"
    store = await Store.connect(database_url, pool_size=1)
    try:
        await store.save_turn(SaveRequest(
            session_id=sid, expected_version=0, state={"id": sid, "v": 4, "data": {}},
            turn=TurnRecord(input={"session_id": sid, "wake": "k"},
                            source=SourceRecord(f"in.{suffix}", 0, 0)),
            outbox=[OutboxEntry(topic=topic, key=sid, payload={"session_id": sid,
                                                               "text": "left behind"})],
        ))
    finally:
        await store.close()
    env = dict(os.environ)
    env.update({
        "DATABASE_URL": database_url,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "METRICS_PORT": "0",
        "RELAY_INTERVAL_MS": "200",
        "KAFKA_IDEMPOTENT_PRODUCER": "false" if kafka_is_embedded else "true",
    })
    process = await asyncio.create_subprocess_exec(
        TURNFLOW, "relay", "--grace-ms", "0", env=env, stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with OutboundReader(kafka_bootstrap, topic) as replies:
            values = await replies.until(lambda v: any(x["session_id"] == sid for x in v))
        assert [v["text"] for v in values if v["session_id"] == sid] == ["left behind"]
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), timeout=30) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_consume_workers_share_the_group_survive_a_kill_and_stop_on_sigterm(
    kafka_bootstrap: str, database_url: str, kafka_is_embedded: bool
) -> None:
    """``consume --workers 2`` runs two consumers of one group, each on its own metrics port;
    forty conversations are all answered; a worker killed with SIGKILL is started again and
    the conversations go on; SIGTERM stops both and the supervisor exits 0."""
    suffix = uuid.uuid4().hex[:8]
    port = free_port_pair()
    env = _service_env("workers", suffix, port, kafka_bootstrap, database_url, kafka_is_embedded,
                       partitions=4)
    for args in (["topics"], ["migrate"]):
        code, _out, err = await run(args, env)
        assert code == 0, err
    process = await asyncio.create_subprocess_exec(
        TURNFLOW, "consume", "--workers", "2",
        "--agent", "tests.integration.harness:counting_agent", env=env,
    )
    sessions = [f"w{i:02d}-{suffix}" for i in range(40)]
    try:
        async with httpx.AsyncClient() as client:
            async with asyncio.timeout(60):
                for worker_port in (port, port + 1):
                    while True:
                        try:
                            ready = await client.get(f"http://127.0.0.1:{worker_port}/readyz")
                        except httpx.TransportError:
                            ready = None
                        if ready is not None and ready.status_code == 200:
                            break
                        await asyncio.sleep(0.2)
        workers = _children(process.pid)
        assert len(workers) == 2
        await produce(kafka_bootstrap, env["INBOUND_TOPIC"], [message(s, "oi") for s in sessions])
        async with OutboundReader(kafka_bootstrap, env["MESSAGES_TOPIC"]) as replies:
            await replies.until(
                lambda v: all(s in verbatim_texts(v) for s in sessions), within=60
            )
            os.kill(workers[0], signal.SIGKILL)
            async with asyncio.timeout(30):
                while not _replaced(process.pid, workers[0]):  # noqa: ASYNC110 - /proc is the signal
                    await asyncio.sleep(0.2)
            await produce(
                kafka_bootstrap, env["INBOUND_TOPIC"], [message(s, "de novo") for s in sessions]
            )
            values = await replies.until(
                lambda v: all(len(verbatim_texts(v).get(s, [])) >= 2 for s in sessions),
                within=90,
            )
        texts = verbatim_texts(values)
        for session_id in sessions:
            assert texts[session_id][:2] == ["1:oi", "2:de novo"], session_id
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), timeout=60) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def _replaced(pid: int, dead: int) -> bool:
    """Whether ``pid`` has two live children again, ``dead`` not among them."""
    children = _children(pid)
    return len(children) == 2 and dead not in children


def _children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return sorted(found)
