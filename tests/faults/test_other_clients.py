"""A channel adapter written with confluent-kafka (librdkafka), the other common Python client.

librdkafka's default partitioner (``consistent_random``) hashes keys with CRC32 where the Java
client, aiokafka and so the scheduler's wakes use murmur2: an adapter that keeps it puts a
conversation's messages on one partition and its wakes on another, read by two consumers at
once. With ``partitioner=murmur2_random`` both agree. Two consumers, a scheduler and 16
conversations whose timers fire between their messages run either way:

- with ``murmur2_random`` every check of the fault ledger holds, replies in turn-log order
  included, and no input is flagged as off its partition;
- with the default, every conversation is flagged once (``input on another partition than its
  session's``), and still each message is applied once, no timer wakes a conversation twice,
  its last timer wakes it once, and every published reply is saved and unique by key: the
  stored session's version refuses a second writer. Only the order between a message and a wake
  taken by two consumers is not promised, so the ledger's order check is left out there.
"""

from __future__ import annotations

import asyncio
import json
import uuid
import zlib
from typing import Any

import confluent_kafka
import pytest

from consumer.partitioner import CachedPartitioner
from tests.faults.ledger import (
    TurnLog,
    applied_exactly_once,
    check_all,
    every_reply_sent,
    keys_owned_by_one_session,
    same_key_same_record,
    saved_before_sent,
    timers_fired_once,
)
from tests.faults.process import (
    INBOUND,
    ConsumerProcess,
    FaultSetup,
    SetupFactory,
    consumers,
    start_scheduler,
)
from tests.faults.process import message as fault_message

pytestmark = [pytest.mark.faults, pytest.mark.integration, pytest.mark.timeout(180)]

PARTITIONS = 4
SESSIONS = 16
ROUNDS = 5
PACE_S = 0.6  # between two messages of a conversation
TIMER_MS = 400  # fires between two messages, so wakes and messages interleave
DELAY_MS = 200  # per message turn
OFF_PARTITION = "input on another partition than its session's"


def _sessions(label: str) -> list[str]:
    """Fresh ids whose CRC32 partition differs from their murmur2 one, so with librdkafka's
    default partitioner every conversation's messages and wakes land on two partitions."""
    murmur2 = CachedPartitioner()
    every = list(range(PARTITIONS))
    chosen: list[str] = []
    while len(chosen) < SESSIONS:
        sid = f"{label}-{uuid.uuid4().hex[:8]}"
        key = sid.encode()
        if zlib.crc32(key) % PARTITIONS != murmur2(key, every, every):
            chosen.append(sid)
    return chosen


def _produce_with_librdkafka(
    bootstrap: str, topic: str, records: list[dict[str, Any]], config: dict[str, Any]
) -> None:
    """What an adapter written with confluent-kafka does: key = session id, JSON value."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    failures: list[str] = []

    def delivered(error: Any, _record: Any) -> None:
        if error is not None:
            failures.append(str(error))

    for record in records:
        producer.produce(topic, json.dumps(record).encode(), key=record["session_id"].encode(),
                         on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0, "librdkafka did not deliver every record"
    assert failures == []


async def _adapter_run(setup: FaultSetup, partitioner: str | None, label: str) -> tuple[
    list[str], TurnLog, Any, int
]:
    """Messages from a librdkafka adapter to a group of two and a scheduler; the sessions,
    the turn log, the ledger and how many off-partition warnings the consumers logged."""
    config: dict[str, Any] = {"enable.idempotence": not setup.embedded}
    if partitioner is not None:
        config["partitioner"] = partitioner
    sessions = _sessions(label)
    env = setup.env(AGENT="tests.faults.agent:timer_agent", FAULT_TIMER_MS=str(TIMER_MS))
    async with consumers() as started:
        await start_scheduler(setup, env, started, max_idle="0.2")
        group = [ConsumerProcess(env, f"c{i}") for i in range(2)]
        started.extend(group)
        for process in group:
            await process.start()

        for j in range(ROUNDS):
            records = [fault_message(sid, f"m{j}", delay_ms=DELAY_MS) for sid in sessions]
            await asyncio.to_thread(
                _produce_with_librdkafka, setup.bootstrap, setup.topics[INBOUND], records, config
            )
            setup.inputs.extend(records)
            await asyncio.sleep(PACE_S)

        def answered(led: Any) -> bool:
            return all(f"{ROUNDS}:woke" in led.texts(sid) for sid in sessions)

        ledger = setup.ledger()
        await ledger.read(until=answered, within=90, settle=2.0)
        for process in started:
            assert await process.stop() == 0, process.raw[-20:]
        warnings = sum(p.logged(OFF_PARTITION) for p in group)

    log = await TurnLog.read(setup.database_url, sessions)
    for sid in sessions:
        replies = [t for t in ledger.texts(sid) if not t.endswith(":woke")]
        assert replies == [f"{j + 1}:m{j}" for j in range(ROUNDS)], sid
    assert timers_fired_once(log, sessions) == []
    return sessions, log, ledger, warnings


async def test_an_adapter_with_murmur2_random_keeps_each_conversation_on_one_partition(
    fault_setup: SetupFactory,
) -> None:
    setup = await fault_setup(partitions=PARTITIONS)
    _sessions_used, log, ledger, warnings = await _adapter_run(setup, "murmur2_random", "m2")
    assert check_all(log, ledger, setup.inputs) == []
    assert warnings == 0


async def test_an_adapter_with_the_default_partitioner_is_flagged_and_loses_nothing(
    fault_setup: SetupFactory,
) -> None:
    setup = await fault_setup(partitions=PARTITIONS)
    sessions, log, ledger, warnings = await _adapter_run(setup, None, "crc")
    problems = (
        applied_exactly_once(log, setup.inputs)
        + every_reply_sent(log, ledger)
        + saved_before_sent(log, ledger)
        + same_key_same_record(ledger)
        + keys_owned_by_one_session(ledger)
    )
    assert problems == []
    assert warnings == len(sessions)  # once per conversation, by the consumer that read it
