"""The consumer end to end: inputs on inbound.turns become replies and timers, exactly once."""

from __future__ import annotations

import uuid

import pytest

from consumer import metrics
from tests.integration.harness import (
    INBOUND,
    MESSAGES,
    SCHEDULE,
    RecordingAgent,
    SetupFactory,
    counting_agent,
    load_when,
    message,
    running_consumer,
    verbatim_texts,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def sample(name: str, **labels: str) -> float:
    value = metrics.REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


def new_session(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


async def test_multi_turn_conversation(service_setup: SetupFactory) -> None:
    """Three messages of one session yield their replies in order, each carrying its input id
    and the saved version, one timer per turn on outbound.schedule, and a wake for the last
    timer is applied as the fourth turn; the turn, publish and lag metrics follow."""
    setup = await service_setup()
    sid = new_session("conv")
    settings = setup.settings()
    inputs = [message(sid, "oi"), message(sid, "quero pizza"), message(sid, "grande")]
    before = {kind: sample("turnflow_turns_total", kind=kind) for kind in ("message", "wake")}
    published_before = sample("turnflow_outbox_published_total", topic=setup.topics[MESSAGES])
    async with running_consumer(settings, counting_agent()) as service:
        await setup.produce(list(inputs))
        async with setup.reader() as replies:
            values = await replies.until(lambda v: len(verbatim_texts(v).get(sid, [])) >= 3)
        async with setup.reader(SCHEDULE) as timers:
            scheduled = await timers.until(lambda v: len(v) >= 3)
        await setup.produce([{"session_id": sid, "wake": scheduled[-1]["key"]}])
        loaded = await load_when(setup.database_url, sid, lambda s: s.version >= 4)
        await wait_until(lambda: sum(service.committed_offsets().values()) >= 4)
        lag = metrics.REGISTRY.get_sample_value("turnflow_consumer_lag", {
            "topic": setup.topics[INBOUND],
            "partition": str(next(iter(service.committed_offsets())).partition),
        })

    verbatim = [v for v in values if v["kind"] == "verbatim"]
    assert [v["text"] for v in verbatim] == ["1:oi", "2:quero pizza", "3:grande"]
    assert [v["input_id"] for v in verbatim] == [m["id"] for m in inputs]
    assert [v["version"] for v in verbatim] == [1, 2, 3]
    assert set(values[0]) == {"session_id", "key", "kind", "text", "after_ms", "run_id",
                              "step_id", "input_id", "version"}
    assert len({t["key"] for t in scheduled}) == 3
    assert set(scheduled[0]) == {"session_id", "key", "at", "replaces"}
    assert loaded.version == 4
    assert loaded.state is not None
    assert loaded.state["runs"] == []
    # The dashboards' counters moved with the turns.
    assert sample("turnflow_turns_total", kind="message") - before["message"] == 3
    assert sample("turnflow_turns_total", kind="wake") - before["wake"] == 1
    assert sample("turnflow_outbox_published_total", topic=setup.topics[MESSAGES]) \
        - published_before == 6
    assert lag == 0


async def test_duplicate_record_is_answered_once(service_setup: SetupFactory) -> None:
    """The same message produced twice (a producer retry) gets one reply; the next message
    continues the count as if the copy had never come, and the copy writes no turn."""
    setup = await service_setup()
    sid = new_session("dup")
    settings = setup.settings()
    first = message(sid, "oi")
    async with running_consumer(settings, counting_agent()):
        await setup.produce([first, first, message(sid, "tchau")])
        async with setup.reader() as replies:
            await replies.until(lambda v: len(verbatim_texts(v).get(sid, [])) >= 2)
            values = await replies.settle(1.0)
        loaded = await load_when(setup.database_url, sid, lambda s: s.version >= 2)
    assert verbatim_texts(values)[sid] == ["1:oi", "2:tchau"]
    assert loaded.state["data"]["n"] == 2
    assert loaded.version == 2


async def test_replayed_records_are_skipped_exactly(service_setup: SetupFactory) -> None:
    """Records read again from the start (a new group on the same topic, as after a lost
    offset commit) are found in the turn log and skipped: no new turn, no new reply."""
    setup = await service_setup()
    sid = new_session("replay")
    await setup.produce([message(sid, f"m{i}") for i in range(3)])
    async with setup.reader() as replies:
        first = setup.settings()
        async with running_consumer(first, counting_agent()):
            await replies.until(lambda v: len(verbatim_texts(v).get(sid, [])) >= 3)
        again = RecordingAgent(counting_agent())
        replay = setup.settings()
        async with running_consumer(replay, again) as service:
            await wait_until(lambda: sum(service.committed_offsets().values()) >= 3)
        values = await replies.settle(0.5)
    assert again.calls == []
    assert verbatim_texts(values)[sid] == ["1:m0", "2:m1", "3:m2"]
    assert len([v for v in values if v["kind"] == "verbatim"]) == 3
