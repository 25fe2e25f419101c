"""Hostile records end to end (PostgreSQL and a broker): a poison pill and an oversized record
each end on the DLQ while the consumer keeps answering the records behind them."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from consumer.scheduler.service import FiringOptions
from store import Store
from tests.integration.harness import (
    DLQ,
    INBOUND,
    SCHEDULE,
    SetupFactory,
    counting_agent,
    message,
    produce,
    running_consumer,
    verbatim_texts,
    wait_until,
)
from tests.integration.test_scheduler_e2e import running_scheduler

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

# A value the default producer accepts (its limit is 1,048,576 bytes for value, key and
# record overhead) but that no longer fits once the dead letter's headers are added.
NEAR_LIMIT = 1_048_400


async def allow_records_of(bootstrap: str, topic: str, size: int) -> None:
    """Raise ``topic``'s ``max.message.bytes`` to ``size``, as an operator would for an inbound
    topic that takes larger records than the DLQ, and wait until the broker reports it. Apache
    Kafka refuses a record past the topic's limit (1 MB by default) at produce time and applies
    a changed limit a moment after acknowledging it; Tansu enforces no limit, so needs none."""
    wanted = str(size)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, configs={
            "max.message.bytes": wanted})
        responses = await admin.alter_configs([resource])
        errors = [r[0] for response in responses for r in response.resources]
        assert errors == [0], f"altering {topic}'s max.message.bytes failed: {responses}"
        asked = ConfigResource(ConfigResourceType.TOPIC, topic, configs={
            "max.message.bytes": None})
        async with asyncio.timeout(20):
            while True:
                (described,) = await admin.describe_configs([asked])
                values = {entry[0]: entry[1] for entry in described.resources[0][4]}
                if values.get("max.message.bytes") == wanted:
                    break
                await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def read_records(bootstrap: str, topic: str, count: int) -> list[Any]:
    """The first ``count`` records of ``topic``, raw (a dead letter's value may be empty)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None,
        enable_auto_commit=False, max_partition_fetch_bytes=4 << 20,
    )
    await consumer.start()
    records: list[Any] = []
    try:
        async with asyncio.timeout(30):
            while len(records) < count:
                for part in (await consumer.getmany(timeout_ms=200)).values():
                    records.extend(part)
    finally:
        await consumer.stop()
    return records


async def test_a_lone_surrogate_in_session_id_is_dead_lettered_and_the_consumer_goes_on(
    service_setup: SetupFactory,
) -> None:
    """The record that used to crash the consumer on every restart (a JSON-escaped lone
    surrogate in session_id) goes to the DLQ as invalid-text at once, the consumer keeps
    running, and the good messages of several sessions before and after it are answered in
    order on the same partition."""
    setup = await service_setup(partitions=1)
    suffix = uuid.uuid4().hex[:6]
    sessions = [f"ok-{i}-{suffix}" for i in range(3)]
    poison = b'{"session_id":"b-sur\\ud800sid","message":"hi"}'
    nul = b'{"session_id":"s-nul-%s\\u0000","message":"hi"}' % suffix.encode()
    async with running_consumer(setup.settings(), counting_agent()) as service:
        await setup.produce([message(sid, "antes") for sid in sessions])
        await setup.produce([poison], key=b"b-sursid")
        await setup.produce([nul], key=f"s-nul-{suffix}".encode())
        await setup.produce([message(sid, "depois") for sid in sessions])
        async with setup.reader() as replies:
            values = await replies.until(
                lambda v: all(len(verbatim_texts(v).get(sid, [])) >= 2 for sid in sessions)
            )
        dead = await read_records(setup.bootstrap, setup.topics[DLQ], 2)
        await wait_until(lambda: sum(service.committed_offsets().values()) == 8)
        assert service.assignment  # still consuming

    texts = verbatim_texts(values)
    assert all(texts[sid] == ["1:antes", "2:depois"] for sid in sessions)
    errors = [dict(r.headers)["error"] for r in dead]
    assert errors == [b"invalid-text", b"invalid-text"]
    assert [r.value for r in dead] == [poison, nul]
    assert b"hi" not in b"".join(dict(r.headers)["detail"] for r in dead)


@pytest.mark.parametrize("size", [NEAR_LIMIT, 1_500_000], ids=["near-limit", "over-limit"])
async def test_an_oversized_record_is_kept_whole_and_its_partition_moves_on(
    service_setup: SetupFactory, size: int
) -> None:
    """A value the producer accepted but that cannot be forwarded to the DLQ (the dead
    letter's headers push it past the limit, or it is past the limit already) is kept in full
    in the dead_letters table; the dead letter names the row, the committed offset moves past
    the record, and the message behind it is answered."""
    setup = await service_setup(partitions=1)
    sid = f"big-{uuid.uuid4().hex[:6]}"
    value = b'{"session_id":"%s","message":"' % sid.encode()
    value += b"x" * (size - len(value) - 2) + b'"}'
    if not setup.embedded:
        await allow_records_of(setup.bootstrap, setup.topics[INBOUND], 2 << 20)
    producer = AIOKafkaProducer(
        bootstrap_servers=setup.bootstrap, acks="all", max_request_size=2 << 20
    )
    await producer.start()
    try:
        await producer.send_and_wait(
            setup.topics[INBOUND], value, key=sid.encode(), headers=[("error", b"forged")]
        )
    finally:
        await producer.stop()
    async with running_consumer(setup.settings(), counting_agent()) as service:
        await setup.produce([message(sid, "depois")])
        async with setup.reader() as replies:
            values = await replies.until(lambda v: len(verbatim_texts(v).get(sid, [])) >= 1)
        (dead,) = await read_records(setup.bootstrap, setup.topics[DLQ], 1)
        await wait_until(lambda: sum(service.committed_offsets().values()) == 2)

    assert verbatim_texts(values)[sid] == ["1:depois"]
    headers = dict(dead.headers)
    assert headers["error"] == b"too-large" and headers["kept-in"] == b"dead_letters"
    assert dead.value in (b"", None) and "original-error" not in headers
    store = await Store.connect(setup.database_url, pool_size=1, max_overflow=0)
    try:
        kept = await store.dead_letter(int(headers["kept-id"]))
    finally:
        await store.close()
    assert kept is not None
    assert kept.value == value and kept.key == sid.encode()
    assert kept.headers == [("error", b"forged")]
    assert kept.source == f"{setup.topics[INBOUND]}:0:0"


async def test_hostile_schedule_records_never_hold_back_later_timers(
    store: Store, service_setup: SetupFactory,
) -> None:
    """Schedule records with a lone surrogate or NUL in session_id or key, or an `at` that
    overflows once moved to UTC, are refused at once; the good timers after them, of several
    sessions, are stored and fired as wakes of their own sessions."""
    setup = await service_setup(partitions=1)
    suffix = uuid.uuid4().hex[:6]
    sessions = [f"timer-{i}-{suffix}" for i in range(3)]
    due = "2026-01-01T00:00:00Z"
    hostile = [
        b'{"session_id":"b-sur\\ud800sid","key":"k1","at":"%s"}' % due.encode(),
        b'{"session_id":"s1","key":"k\\u0000","at":"%s"}' % due.encode(),
        b'{"session_id":"s1","key":"k2","at":"9999-12-31T23:00:00-05:00"}',
        b'{"session_id":"s1","key":"k3","at":"0001-01-01T00:30:00+01:00"}',
    ]
    good = [
        json.dumps({"session_id": sid, "key": f"wake-{sid}", "at": due}).encode()
        for sid in sessions
    ]
    await produce(setup.bootstrap, setup.topics[SCHEDULE], [*hostile, *good], key=b"s1")
    async with running_scheduler(store, setup, group_id=f"sched-{suffix}",
                                 options=FiringOptions(max_idle=0.5)):
        async with setup.reader(INBOUND) as inbound:
            wakes = await inbound.until(lambda v: len(v) >= len(sessions), within=60)
    assert sorted((w["session_id"], w["wake"]) for w in wakes) == sorted(
        (sid, f"wake-{sid}") for sid in sessions
    )
    assert await store.timers_pending() == 0
