"""Rows saved but never published (a crash between save and send) still go out, in order."""

from __future__ import annotations

import uuid

import pytest

from consumer.outbox import OutboxPublisher, new_producer
from consumer.relay import OutboxRelay
from store import OutboxEntry, SaveRequest, SourceRecord, Store, TurnRecord
from tests.integration.harness import (
    INBOUND,
    MESSAGES,
    RecordingAgent,
    SetupFactory,
    counting_agent,
    message,
    running_consumer,
    verbatim_texts,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def reply(session_id: str, n: int, text: str, topic: str) -> OutboxEntry:
    return OutboxEntry(topic=topic, key=session_id, payload={
        "session_id": session_id, "key": f"saved:{n}", "kind": "verbatim", "text": text,
        "after_ms": 0, "run_id": "r1", "step_id": "say", "input_id": f"i{n}", "version": n,
    })


async def test_replay_after_a_crash_between_save_and_send_publishes_the_saved_reply(
    service_setup: SetupFactory,
) -> None:
    """A record whose turn was saved (with its outbox) by a consumer that died before
    publishing is not run again on replay; its saved reply is published instead, and the
    next input continues from the saved session."""
    setup = await service_setup(partitions=1)
    sid = f"crash-{uuid.uuid4().hex[:8]}"
    first = message(sid, "primeira")
    await setup.produce([first])
    # What the dead consumer left: the turn saved at offset 0, its reply unpublished.
    store = await Store.connect(setup.database_url, pool_size=1)
    try:
        await store.save_turn(SaveRequest(
            session_id=sid,
            expected_version=0,
            state={"id": sid, "v": 4, "version": 0, "data": {"n": 1, "last": "primeira"}},
            turn=TurnRecord(input={"session_id": sid, "message": "primeira"},
                            source=SourceRecord(setup.topics[INBOUND], 0, 0)),
            outbox=[reply(sid, 1, "1:primeira", setup.topics[MESSAGES])],
        ))
    finally:
        await store.close()

    agent = RecordingAgent(counting_agent())
    settings = setup.settings(relay_grace_ms=600_000)
    async with running_consumer(settings, agent):
        await setup.produce([message(sid, "segunda")])
        async with setup.reader() as replies:
            values = await replies.until(lambda v: len(verbatim_texts(v).get(sid, [])) >= 2)
    assert verbatim_texts(values)[sid] == ["1:primeira", "2:segunda"]
    assert [call[0] for call in agent.calls] == [sid]  # only the new input ran


async def test_relay_publishes_rows_left_unpublished_in_order(service_setup: SetupFactory) -> None:
    """The relay sends a session's unpublished rows oldest first and marks them, so a second
    pass sends nothing."""
    setup = await service_setup(partitions=1)
    sid = f"relay-{uuid.uuid4().hex[:8]}"
    store = await Store.connect(setup.database_url, pool_size=2)
    producer = new_producer(setup.bootstrap, idempotent=not setup.embedded)
    await producer.start()
    try:
        for n in (1, 2):
            await store.save_turn(SaveRequest(
                session_id=sid, expected_version=n - 1,
                state={"id": sid, "v": 4, "version": 0, "data": {"n": n}},
                turn=TurnRecord(input={"session_id": sid, "message": f"m{n}"},
                                source=SourceRecord(setup.topics[INBOUND], 0, 100 + n)),
                outbox=[reply(sid, n, f"{n}:m{n}", setup.topics[MESSAGES])],
            ))
        relay = OutboxRelay(OutboxPublisher(store, producer), store, interval_s=1, grace_s=0)
        sent = await relay.run_once()
        again = await relay.run_once()
        async with setup.reader() as replies:
            values = await replies.until(lambda v: len(v) >= 2)
            values = await replies.settle(0.3)
    finally:
        await producer.stop()
        await store.close()
    assert (sent, again) == (2, 0)
    assert [v["text"] for v in values] == ["1:m1", "2:m2"]
