"""Bursts through the real consumer, PostgreSQL and the broker: messages of a conversation
that wait behind the one being answered are answered together, once, in their own
conversation, and a restart that replays part of a burst answers only what is new."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from engine import Agent, ModelRequest, ModelResponse
from store import Store
from tests.integration.harness import SetupFactory, running_consumer, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


class EchoModel:
    """Speaks the customer's words back (a burst's messages one per line), so each reply
    shows which messages its turn answered. A turn whose message starts with ``hold`` waits
    for ``release``: a turn kept in flight while more messages arrive."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls: list[str] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        said = str(request.meta.get("message") or "")
        self.calls.append(said)
        if said.startswith("hold"):
            await self.release.wait()
        return ModelResponse(json={"message": said.replace("\n", " | ")})


def echo_agent(model: EchoModel) -> Agent:
    return Agent(name="Eco", provider=model, idle="Answer the customer.")


def msg(session_id: str, text: str) -> dict[str, Any]:
    return {"session_id": session_id, "message": text, "id": f"{session_id}/{text}"}


def replies(values: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    seen: set[tuple[str, str]] = set()
    for value in values:
        if (value["session_id"], value["key"]) in seen:
            continue
        seen.add((value["session_id"], value["key"]))
        out.setdefault(value["session_id"], []).append(value["text"])
    return out


async def test_a_burst_arriving_while_a_turn_is_in_flight_is_answered_once_together(
    service_setup: SetupFactory, database_url: str
) -> None:
    """Eight conversations each send one message whose turn is held at the model, then three
    more; once released, each gets two replies: the first message, then the three together
    (one model call), and nothing of another conversation."""
    setup = await service_setup()
    sids = [f"burst-{i}-{uuid.uuid4().hex[:6]}" for i in range(8)]
    model = EchoModel()
    async with running_consumer(setup.settings(merge_bursts=True), echo_agent(model)) as service:
        await setup.produce([msg(s, f"hold {s}") for s in sids])
        await wait_until(lambda: len(model.calls) == len(sids), within=60)
        await setup.produce([msg(s, f"{w} {s}") for s in sids for w in ("hi", "change", "fri")])
        await wait_until(lambda: service.parts.workers.queues.queued >= 3 * len(sids), within=60)
        model.release.set()
        async with setup.reader() as reader:
            await reader.until(
                lambda v: all(len(replies(v).get(s, [])) >= 2 for s in sids), within=60
            )
            values = await reader.settle(1.0)
    got = replies(values)
    for s in sids:
        assert got[s] == [f"hold {s}", f"hi {s} | change {s} | fri {s}"], s
    assert len(model.calls) == 2 * len(sids)  # one model call per burst, not one per message
    store = await Store.connect(database_url, pool_size=1, max_overflow=0)
    try:
        for s in sids:
            loaded = await store.load(s, history_limit=20, input_ids=[f"{s}/hi {s}"])
            assert loaded.duplicate
            users = [e["text"] for e in loaded.history if e["role"] == "user"]
            assert users == [f"hold {s}", f"hi {s}", f"change {s}", f"fri {s}"]
    finally:
        await store.close()


async def test_a_burst_split_by_a_restart_answers_only_the_new_messages(
    service_setup: SetupFactory,
) -> None:
    """A consumer answers two messages as one turn and stops; a consumer that starts over
    from the first offset (its group committed nothing) fetches those two again with two
    new ones and answers only the new ones, together."""
    setup = await service_setup(partitions=2)
    sids = [f"split-{i}-{uuid.uuid4().hex[:6]}" for i in range(5)]
    model = EchoModel()
    model.release.set()
    await setup.produce([msg(s, f"{w} {s}") for s in sids for w in ("a", "b")])
    first_group = setup.settings(merge_bursts=True, burst_window_ms=500)
    async with running_consumer(first_group, echo_agent(model)):
        async with setup.reader() as reader:
            await reader.until(lambda v: all(len(replies(v).get(s, [])) >= 1 for s in sids))
    await setup.produce([msg(s, f"{w} {s}") for s in sids for w in ("c", "d")])
    fresh_group = setup.settings(
        merge_bursts=True, burst_window_ms=500, group_id=f"g-{uuid.uuid4().hex[:8]}"
    )
    async with running_consumer(fresh_group, echo_agent(model)):
        async with setup.reader() as reader:
            await reader.until(lambda v: all(len(replies(v).get(s, [])) >= 2 for s in sids))
            values = await reader.settle(1.5)
    got = replies(values)
    for s in sids:
        assert got[s] == [f"a {s} | b {s}", f"c {s} | d {s}"], s
    assert len(model.calls) == 2 * len(sids)


async def test_with_merging_off_each_message_is_its_own_turn(
    service_setup: SetupFactory,
) -> None:
    """MERGE_BURSTS=false keeps one turn per message even when messages wait."""
    setup = await service_setup(partitions=1)
    sid = f"nomerge-{uuid.uuid4().hex[:6]}"
    model = EchoModel()
    model.release.set()
    await setup.produce([msg(sid, w) for w in ("x", "y", "z")])
    async with running_consumer(setup.settings(merge_bursts=False), echo_agent(model)):
        async with setup.reader() as reader:
            values = await reader.until(lambda v: len(replies(v).get(sid, [])) >= 3)
    assert replies(values)[sid] == ["x", "y", "z"]


async def test_a_correction_during_the_confirmation_end_to_end(
    service_setup: SetupFactory, database_url: str
) -> None:
    """Six conversations with the demo agent reach the confirmation, then change the day:
    each is asked to confirm again with its own new day, and its stored session has it."""
    from engine import FakeClock
    from engine.providers import RuleProvider
    from examples.demo_agent import build_agent

    setup = await service_setup()
    days = ["tuesday", "friday", "saturday"]
    sids = [f"fix-{i}-{uuid.uuid4().hex[:6]}" for i in range(6)]
    agent = build_agent(RuleProvider(), FakeClock("2026-01-05T09:00:00Z"))
    steps = [
        ("book", "I want to book a repair"),
        ("what", "a tune-up on monday"),
        ("fix", None),  # "actually make it <day>", the day depending on the conversation
    ]
    async with running_consumer(setup.settings(merge_bursts=True), agent):
        async with setup.reader() as reader:
            for n, (label, text) in enumerate(steps):
                await setup.produce([
                    {"session_id": s, "id": f"{label}-{s}",
                     "message": text or f"actually make it {days[i % 3]}"}
                    for i, s in enumerate(sids)
                ])
                await reader.until(lambda v, n=n: all(
                    sum(1 for r in v if r["session_id"] == s and r["input_id"].startswith(
                        steps[n][0])) >= 1 for s in sids
                ))
            values = await reader.settle(1.0)
    store = await Store.connect(database_url, pool_size=1, max_overflow=0)
    try:
        for i, s in enumerate(sids):
            asked = [r["text"] for r in values
                     if r["session_id"] == s and r["input_id"] == f"fix-{s}"]
            assert asked == [f"Sure, {days[i % 3]} then: tune-up on {days[i % 3]}.",
                             "Could you confirm the booking (yes or no)?"], s
            loaded = await store.load(s)
            assert loaded.state["data"]["day"] == days[i % 3]
    finally:
        await store.close()


async def test_many_conversations_bursting_at_once_get_one_reply_each_of_their_own(
    service_setup: SetupFactory,
) -> None:
    """Twenty-four conversations send three messages each at once, spread over three
    partitions; with a quiet window each gets exactly one reply naming its own three
    messages in order, and one model call."""
    setup = await service_setup(partitions=3)
    sids = [f"many-{i}-{uuid.uuid4().hex[:6]}" for i in range(24)]
    model = EchoModel()
    model.release.set()
    records = [msg(s, f"{w}.{s}") for s in sids for w in ("one", "two", "three")]
    windowed = setup.settings(merge_bursts=True, burst_window_ms=400)
    async with running_consumer(windowed, echo_agent(model)):
        await setup.produce(records)
        async with setup.reader() as reader:
            await reader.until(lambda v: all(s in replies(v) for s in sids))
            values = await reader.settle(1.5)
    got = replies(values)
    for s in sids:
        assert got[s] == [f"one.{s} | two.{s} | three.{s}"], s
    assert len(model.calls) == len(sids)
