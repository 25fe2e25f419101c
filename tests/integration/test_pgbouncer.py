"""The consumer and the scheduler through PgBouncer in transaction mode (``DATABASE_POOLER``).

Debian's ``pgbouncer`` runs in front of the test PostgreSQL with a pool far smaller than its
clients (tests/fixtures/pgbouncer.py), so every client's statements land on server connections
other clients used a moment before. Many conversations run at once, each with its own words, a
timer the scheduler fires and state of its own; whatever leaked between server connections
(a prepared statement, a setting, a transaction) would show as an unanswered input, an error,
or one conversation's words, keys, timers or state in another's.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from consumer.processes import free_port
from consumer.scheduler.service import FiringOptions, build_scheduler
from engine import Agent, ok
from store import OutboxEntry, SaveRequest, SourceRecord, Store, TurnRecord
from tests.fixtures.pgbouncer import transaction_pooler
from tests.integration.harness import (
    INBOUND,
    SCHEDULE,
    OutboundReader,
    ServiceSetup,
    SetupFactory,
    make_settings,
    message,
    produce,
    running_consumer,
    verbatim_texts,
)
from tests.integration.test_consume_process import TURNFLOW, _service_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CONVERSATIONS = 48


def tallying_agent() -> Agent:
    """Counts a conversation's messages and echoes the last label (``"2:<label>"``), then parks
    on a 1.5 s timer (a real one: a ``do`` step follows the wait) whose firing says
    ``"nudge 2:<label>"``: each reply and each woken turn carries words only its own
    conversation sent."""

    async def count(ctx: Any) -> Any:
        return ok(data={
            "n": int(ctx.data.get("n") or 0) + 1,
            "last": str(ctx.context.get("label", "")),
        })

    async def woken(ctx: Any) -> Any:
        return ok(data={"wakes": int(ctx.data.get("wakes") or 0) + 1})

    return Agent(
        name="Contagem",
        fields={
            "n": {"type": "integer"}, "last": {"type": "string"}, "wakes": {"type": "integer"},
        },
        actions={"count": count, "woken": woken},
        flows=[{
            "id": "tally",
            "on": [{"message": []}],
            "steps": [
                {"id": "c", "do": "count"},
                {"id": "say", "say": "{{n}}:{{last}}"},
                {"id": "w", "wait": {"ms": 1500}, "then": "woken", "else": "end"},
                {"id": "woken", "do": "woken"},
                {"id": "nudge", "say": "nudge {{n}}:{{last}}"},
            ],
        }],
    )


@pytest.fixture
def pooled_url(database_url: str) -> Iterator[str]:
    """The session's database through PgBouncer in transaction mode, three server
    connections for every client."""
    with transaction_pooler(database_url, pool_size=3) as pooler:
        yield pooler.url


@asynccontextmanager
async def running_scheduler(
    store: Store, setup: ServiceSetup, group_id: str
) -> AsyncIterator[None]:
    """The scheduler on this test's topics until the block ends."""
    scheduler = build_scheduler(
        store, bootstrap_servers=setup.bootstrap, schedule_topic=setup.topics[SCHEDULE],
        inbound_topic=setup.topics[INBOUND], group_id=group_id,
        options=FiringOptions(max_idle=0.5),
    )
    stop = asyncio.Event()
    scheduling = asyncio.create_task(scheduler.run(stop))
    try:
        yield
    finally:
        stop.set()
        async with asyncio.timeout(30):
            await scheduling


async def test_many_conversations_through_a_transaction_pooler_stay_apart(
    store: Store, service_setup: SetupFactory, pooled_url: str,
) -> None:
    """Through PgBouncer in transaction mode, every input of 48 concurrent conversations is
    answered, every timer fires once for its own conversation, and no reply, key, timer or
    state of one conversation reaches another."""
    setup = await service_setup(partitions=4)
    run = uuid.uuid4().hex[:6]
    sessions = [f"pool-{run}-{i:02d}" for i in range(CONVERSATIONS)]
    settings = make_settings(
        setup.bootstrap, pooled_url, setup.topics, embedded=setup.embedded,
        database_pooler="transaction",
    )
    pooled = await Store.connect(pooled_url, pool_size=4, pooler="transaction")
    expected = {s: [f"1:{s}-a", f"nudge 1:{s}-a", f"2:{s}-b", f"nudge 2:{s}-b"] for s in sessions}
    try:
        async with (
            running_scheduler(pooled, setup, f"{settings.group_id}-scheduler"),
            running_consumer(settings, tallying_agent()),
        ):
            # Two rounds: a conversation's second message goes once its first timer fired,
            # so each conversation's replies have one order only.
            async with setup.reader() as replies:
                await setup.produce([message(s, f"{s}-a") for s in sessions])
                await replies.until(lambda v: _replies(v) >= 2 * CONVERSATIONS, within=120)
                await setup.produce([message(s, f"{s}-b") for s in sessions])
                await replies.until(lambda v: _replies(v) >= 4 * CONVERSATIONS, within=120)
                values = await replies.settle(2.0)
            async with setup.reader(SCHEDULE) as scheduled:
                timers = await scheduled.until(lambda v: len(v) >= 2 * CONVERSATIONS, within=30)
            async with setup.reader(INBOUND) as inbound:
                wakes = [v for v in await inbound.settle(1.0) if "wake" in v]
    finally:
        await pooled.close()

    assert verbatim_texts(values) == expected
    reply_keys = [(v["session_id"], v["key"]) for v in values]
    assert len({key for _, key in reply_keys}) == len(set(reply_keys)) == 4 * CONVERSATIONS
    assert all(v["session_id"] in v["text"] for v in values if v["kind"] == "verbatim")
    timer_keys = {(t["session_id"], t["key"]) for t in timers}
    assert len(timer_keys) == 2 * CONVERSATIONS
    assert len({key for _, key in timer_keys}) == 2 * CONVERSATIONS
    assert sorted((w["session_id"], w["wake"]) for w in wakes) == sorted(timer_keys)
    for session_id in sessions:
        loaded = await store.load(session_id)
        assert loaded.version == 4, session_id
        assert loaded.state is not None
        assert loaded.state["data"]["n"] == 2, session_id
        assert loaded.state["data"]["last"] == f"{session_id}-b"
        assert loaded.state["data"]["wakes"] == 2, session_id
    assert await store.timers_pending() == 0


def _turn_texts(values: list[dict[str, Any]]) -> dict[str, list[str]]:
    """``verbatim_texts`` of the replies turns sent (not the relay's hand-written row)."""
    return verbatim_texts([v for v in values if "kind" in v])


def _replies(values: list[dict[str, Any]]) -> int:
    return sum(len(texts) for texts in verbatim_texts(values).values())


async def test_consume_and_relay_processes_run_through_the_pooler(
    kafka_bootstrap: str, database_url: str, pooled_url: str, kafka_is_embedded: bool,
) -> None:
    """``turnflow consume`` and ``turnflow relay`` started with ``DATABASE_POOLER=transaction``
    on PgBouncer's URL come up, answer a message and publish a row left behind, and exit 0 on
    SIGTERM, where without the setting ``consume`` stopped at once on a prepared statement."""
    suffix = uuid.uuid4().hex[:8]
    env = _service_env("pool", suffix, free_port(), kafka_bootstrap, pooled_url,
                       kafka_is_embedded, partitions=2)
    env["DATABASE_POOLER"] = "transaction"
    topics = await asyncio.create_subprocess_exec(TURNFLOW, "topics", env=env)
    assert await asyncio.wait_for(topics.wait(), timeout=60) == 0
    sid, left = f"poolproc-{suffix}", f"poolrelay-{suffix}"
    direct = await Store.connect(database_url, pool_size=1)
    try:  # a row a dead consumer left unpublished, for the relay
        await direct.save_turn(SaveRequest(
            session_id=left, expected_version=0, state={"id": left, "v": 4, "data": {}},
            turn=TurnRecord(input={"session_id": left, "wake": "k"},
                            source=SourceRecord(f"in.{suffix}", 0, 0)),
            outbox=[OutboxEntry(topic=env["MESSAGES_TOPIC"], key=left,
                                payload={"session_id": left, "text": "left behind"})],
        ))
    finally:
        await direct.close()
    consume = await asyncio.create_subprocess_exec(
        TURNFLOW, "consume", "--workers", "1",
        "--agent", "tests.integration.harness:counting_agent",
        env=env, stderr=asyncio.subprocess.PIPE,
    )
    relay = await asyncio.create_subprocess_exec(
        TURNFLOW, "relay", "--grace-ms", "0", env={**env, "METRICS_PORT": "0"},
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert consume.stderr is not None
        logs: list[str] = []
        async with asyncio.timeout(60):
            while not any('"consumer ready"' in line for line in logs):
                line = (await consume.stderr.readline()).decode()
                assert line, f"consume exited early: {logs}"
                logs.append(line)
        await produce(kafka_bootstrap, env["INBOUND_TOPIC"], [message(sid, "oi")])
        async with OutboundReader(kafka_bootstrap, env["MESSAGES_TOPIC"]) as replies:
            values = await replies.until(
                lambda v: sid in _turn_texts(v) and any(x["session_id"] == left for x in v),
                within=60,
            )
        assert _turn_texts(values)[sid] == ["1:oi"]
        assert [v["text"] for v in values if v["session_id"] == left] == ["left behind"]
        for process in (consume, relay):
            process.send_signal(signal.SIGTERM)
        if consume.stderr is not None:
            await asyncio.wait_for(consume.stderr.read(), timeout=30)
        assert await asyncio.wait_for(consume.wait(), timeout=30) == 0
        assert await asyncio.wait_for(relay.wait(), timeout=30) == 0
    finally:
        for process in (consume, relay):
            if process.returncode is None:
                process.kill()
                await process.wait()
