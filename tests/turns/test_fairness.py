"""Fair turn slots: the weighted fair queue's rules, and one consumer serving a flooding
workspace beside quiet ones without mixing anything of one conversation into another."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiokafka.structs import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer import metrics
from consumer.hosting.routing import Route
from consumer.outbox import OutboxPublisher
from consumer.settings import Settings, plan_numbers
from consumer.turns.fairness import FairQueue, FairSlots
from consumer.turns.pipeline import (
    Admission,
    OutboundTopics,
    TurnPipeline,
    TurnWork,
    delivery,
)
from consumer.turns.service import ConsumerService
from consumer.turns.slots import LEASE_MAX, LEASE_S, LEASE_SHARE, MinuteLease
from tests.consumer.fakes import FakeKafkaConsumer, FakeProducer, FakeStore, fake_clients
from tests.turns.test_backpressure import until

# --- the queue -------------------------------------------------------------------------------

tenants = st.sampled_from(["a", "b", "c", "d"])
operations = st.lists(
    st.one_of(
        st.tuples(st.just("push"), tenants, st.integers(0, 5)),  # tenant, conversation
        st.tuples(st.just("pop"), st.just(""), st.just(0)),
    ),
    max_size=200,
)


@given(operations, st.dictionaries(tenants, st.sampled_from([0.5, 1.0, 2.0, 3.0])))
def test_any_interleaving_keeps_each_conversations_order_and_loses_nothing(
    ops: list[tuple[str, str, int]], weights: dict[str, float]
) -> None:
    """Whatever the pushes, pops and weights, each conversation's items come out in the order
    they went in, nothing comes out twice and everything pushed comes out in the end."""
    queue: FairQueue[str, tuple[str, int, int]] = FairQueue()
    pushed: list[tuple[str, int, int]] = []
    popped: list[tuple[str, int, int]] = []
    for n, (op, tenant, conversation) in enumerate(ops):
        if op == "push":
            item = (tenant, conversation, n)
            queue.push(tenant, item, weights.get(tenant, 1.0))
            pushed.append(item)
        elif (got := queue.pop()) is not None:
            assert got[0] == got[1][0]  # an item comes out as its own tenant's
            popped.append(got[1])
    while (got := queue.pop()) is not None:
        popped.append(got[1])
    assert sorted(popped) == sorted(pushed)
    assert len(queue) == 0
    for key in {(t, c) for t, c, _ in pushed}:
        assert [n for t, c, n in popped if (t, c) == key] == sorted(
            n for t, c, n in pushed if (t, c) == key
        )


@given(st.lists(st.sampled_from([1.0, 2.0, 3.0, 4.0]), min_size=2, max_size=4),
       st.integers(20, 400))
def test_backlogged_tenants_share_by_their_weights(weights: list[float], pops: int) -> None:
    """Tenants that always have items waiting get slots in proportion to their weights, each
    within one of its weight's worth of items (stride scheduling's bound) of its exact share."""
    queue: FairQueue[int, int] = FairQueue()
    for tenant, weight in enumerate(weights):
        for i in range(pops + 1):
            queue.push(tenant, i, weight)
    served = Counter(queue.pop()[0] for _ in range(pops))  # type: ignore[index]
    total = sum(weights)
    slack = 1 + max(weights) / min(weights)
    for tenant, weight in enumerate(weights):
        assert abs(served[tenant] - pops * weight / total) <= slack, (served, weights)


@given(st.integers(1, 2000), st.integers(1, 6))
def test_a_tenant_arriving_behind_a_flood_is_served_at_once(flood: int, others: int) -> None:
    """A tenant with nothing waiting that queues one item behind a flood of any length (and
    ``others`` more tenants of equal weight, each with a backlog) is served within as many pops
    as there are tenants: it never waits for the flood's backlog."""
    queue: FairQueue[str, int] = FairQueue()
    for i in range(flood):
        queue.push("flood", i)
    for t in range(others):
        queue.push(f"o{t}", 0)
        queue.push(f"o{t}", 1)
    for _ in range(min(flood, 3)):
        queue.pop()  # the flood has been running for a while
    queue.push("late", 0)
    for _ in range(others + 2):
        got = queue.pop()
        assert got is not None
        if got[0] == "late":
            return
    pytest.fail("the late tenant waited behind the others' backlogs")


def test_an_idle_tenant_earns_no_credit() -> None:
    """A tenant that had nothing waiting while another ran alone does not then get a run of
    slots to catch up: the two alternate from its return."""
    queue: FairQueue[str, int] = FairQueue()
    for i in range(100):
        queue.push("busy", i)
    for _ in range(50):
        queue.pop()
    for i in range(10):
        queue.push("back", i)
    order = [queue.pop()[0] for _ in range(10)]  # type: ignore[index]
    assert order.count("back") == 5 and order.count("busy") == 5


def test_an_ineligible_tenant_is_passed_over_and_keeps_its_place() -> None:
    """A tenant at its cap is skipped (its items stay queued, in order); once eligible, it is
    served before the tenants that went on meanwhile, since its pass did not grow."""
    queue: FairQueue[str, int] = FairQueue()
    for i in range(3):
        queue.push("capped", i)
        queue.push("other", i)
    assert queue.pop(lambda t: t != "capped") == ("other", 0)
    assert queue.pop(lambda t: t != "capped") == ("other", 1)
    assert queue.pop(lambda t: False) is None
    assert queue.pop() == ("capped", 0)
    assert queue.remove("capped", 1) and not queue.remove("capped", 1)
    assert [queue.pop(), queue.pop()] == [("capped", 2), ("other", 2)]
    assert len(queue) == 0


def test_a_weight_that_is_not_positive_is_refused() -> None:
    """A zero, negative or NaN weight would stall or break the order: refused at the push."""
    queue: FairQueue[str, int] = FairQueue()
    for weight in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="weight"):
            queue.push("a", 1, weight)
    assert len(queue) == 0


# --- least served first, within a workspace --------------------------------------------------


def served_round(queue: FairQueue[str, str], tenant: str, conversations: list[str]) -> None:
    """Each conversation queues a turn and is served once: a round of the flood."""
    for conversation in conversations:
        queue.push(tenant, conversation, conversation=conversation)
    for _ in conversations:
        assert queue.pop() is not None


def test_a_new_conversation_goes_before_hundreds_that_already_had_turns() -> None:
    """Six hundred conversations of one workspace each had three turns and each has its next
    one waiting; a new conversation queued after all of them gets the very next slot, not the
    one after six hundred turns (round robin)."""
    queue: FairQueue[str, str] = FairQueue()
    flood = [f"flood-{i}" for i in range(600)]
    for _ in range(3):
        served_round(queue, "ws", flood)
    for conversation in flood:
        queue.push("ws", conversation, conversation=conversation)
    queue.push("ws", "new", conversation="new")
    assert queue.pop() == ("ws", "new")
    assert queue.served("ws", "new") == 1
    # The flood then goes on in its own order, every conversation once before any twice.
    assert [queue.pop()[1] for _ in range(600)] == flood  # type: ignore[index]
    assert len(queue) == 0


def test_turns_go_to_the_least_served_conversations_first_oldest_first_among_equals() -> None:
    """Conversations that had 0, 1, 2 and 3 turns, queued in the opposite order, are served
    fewest turns first; equals in the order they queued."""
    queue: FairQueue[str, str] = FairQueue()
    had = {"c3": 3, "c2": 2, "c2b": 2, "c1": 1, "c0": 0}
    for conversation, turns in had.items():
        for _ in range(turns):
            queue.push("ws", conversation, conversation=conversation)
            queue.pop()
    for conversation in had:
        queue.push("ws", conversation, conversation=conversation)
    assert [queue.pop()[1] for _ in had] == ["c0", "c1", "c2", "c2b", "c3"]  # type: ignore[index]


def test_the_service_counted_is_forgotten_when_the_busy_period_ends() -> None:
    """Counts last as long as the workspace has turns waiting or running: ``end_busy`` (no turn
    waiting, none running) forgets them, and a conversation back after the rush is new again;
    ``end_busy`` with turns still waiting changes nothing."""
    queue: FairQueue[str, str] = FairQueue()
    served_round(queue, "ws", ["a", "b"])
    queue.push("ws", "a", conversation="a")
    queue.end_busy("ws")  # "a" still waits: the busy period goes on
    assert queue.served("ws", "b") == 1
    queue.pop()
    queue.end_busy("ws")
    assert queue.served("ws", "a") == 0 and queue.served("ws", "b") == 0


async def test_slots_forget_a_workspaces_counts_once_it_holds_none_and_none_wait() -> None:
    """Through ``FairSlots``: a conversation's turns count while its workspace holds a slot,
    and are forgotten once the workspace holds none and has nothing waiting."""
    slots = FairSlots(2)
    await slots.take("ws", conversation="a")
    await slots.take("ws", conversation="b")
    slots.give_back("ws")
    assert slots.served("ws", "a") == 1  # "b" still runs: the busy period goes on
    slots.give_back("ws")
    assert slots.served("ws", "a") == 0 and slots.free == 2


def test_a_stream_of_new_conversations_does_not_starve_one_that_had_turns() -> None:
    """One conversation that had a turn waits while a new conversation arrives at every grant,
    for ever: it is still served within ``age_per_turn`` grants of its queueing, not never."""
    queue: FairQueue[str, str] = FairQueue(age_per_turn=16, service_cap=4)
    served_round(queue, "ws", ["old"])
    queue.push("ws", "old", conversation="old")
    for n in range(1000):
        queue.push("ws", f"new-{n}", conversation=f"new-{n}")
        if queue.pop()[1] == "old":  # type: ignore[index]
            assert n <= 16 + 1, n
            return
    pytest.fail("the conversation that had a turn starved behind new ones")


arrivals = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.sampled_from(["a", "b"]), st.integers(0, 30)),
        st.tuples(st.just("pop"), st.just(""), st.just(0)),
    ),
    max_size=400,
)


@settings(max_examples=200)
@given(arrivals, st.integers(1, 8), st.integers(0, 4))
def test_no_conversation_waits_beyond_its_bound_whatever_arrives(
    ops: list[tuple[str, str, int]], age: int, cap: int
) -> None:
    """Any sequence of arrivals and grants over two workspaces (a conversation queues again
    only once its turn was served, as a conversation's worker does): every waiting turn is
    granted within ``age x min(turns it had, cap)`` grants of its workspace plus the turns
    waiting in that workspace, and nothing is lost or granted twice. The same bound holds
    for every turn still waiting at the end."""
    queue: FairQueue[str, tuple[str, int]] = FairQueue(age_per_turn=age, service_cap=cap)
    grants: Counter[str] = Counter()  # per workspace
    waiting: dict[tuple[str, int], tuple[int, int]] = {}  # -> (grants at queueing, bound)
    most_waiting: Counter[str] = Counter()
    served: Counter[tuple[str, int]] = Counter()
    granted: list[tuple[str, int]] = []

    def check_bounds() -> None:
        for (tenant, _), (since, bound) in waiting.items():
            assert grants[tenant] - since <= bound + most_waiting[tenant], (since, bound)

    for op, tenant, conversation in ops:
        if op == "push":
            key = (tenant, conversation)
            if key in waiting:
                continue  # one turn waiting per conversation
            waiting[key] = (grants[tenant], age * min(served[key], cap))
            queue.push(tenant, key, conversation=conversation)
            most_waiting[tenant] = max(most_waiting[tenant], queue.waiting(tenant))
        elif (got := queue.pop()) is not None:
            tenant, key = got
            assert key in waiting and key[0] == tenant
            del waiting[key]
            grants[tenant] += 1
            served[key] += 1
            granted.append(key)
        check_bounds()
    while (got := queue.pop()) is not None:
        tenant, key = got
        del waiting[key]
        grants[tenant] += 1
        check_bounds()
    assert not waiting and len(queue) == 0


def test_tenants_tied_on_their_pass_serve_the_least_served_conversation_first() -> None:
    """Two workspaces of equal weight start at the same pass: the one whose next turn is of a
    conversation with nothing served goes first, whichever queued first."""
    queue: FairQueue[str, str] = FairQueue()
    served_round(queue, "old", ["x"])
    queue.push("old", "x", conversation="x")
    queue.push("new", "y", conversation="y")
    assert queue.pop() == ("new", "y")


def test_a_workspaces_lanes_take_turns_so_a_broadcast_never_hides_a_new_customer() -> None:
    """A workspace's host lane holds a broadcast of 5,000 starts (5,000 conversations with
    nothing served, queued first); a new customer's message of the same workspace, in the
    customer lane, is granted next, and the lanes then alternate while both have turns."""
    queue: FairQueue[str, str] = FairQueue()
    for n in range(5000):
        queue.push("ws", f"start-{n}", conversation=f"b{n}", lane="host")
    queue.pop()
    queue.push("ws", "hello", conversation="new", lane="customer")
    queue.push("ws", "hi", conversation="new2", lane="customer")
    assert [queue.pop()[1] for _ in range(4)] == [  # type: ignore[index]
        "hello", "start-1", "hi", "start-2"]
    assert queue.waiting("ws") == 4997
    assert queue.remove("ws", "start-3") and queue.pop() == ("ws", "start-4")


# --- the slots -------------------------------------------------------------------------------


async def test_slots_respect_a_tenants_cap_and_every_waiter_gets_one() -> None:
    """Twenty turns of a tenant capped at two and twenty of an uncapped one, on four slots:
    the capped one never holds more than two, all forty run, and every slot comes back."""
    slots = FairSlots(4)
    held: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    done: list[str] = []

    async def turn(tenant: str, cap: int | None) -> None:
        await slots.take(tenant, cap=cap)
        held[tenant] += 1
        peak[tenant] = max(peak[tenant], held[tenant])
        await asyncio.sleep(0.001)
        held[tenant] -= 1
        slots.give_back(tenant)
        done.append(tenant)

    await asyncio.gather(*[turn("capped", 2) for _ in range(20)],
                         *[turn("free", None) for _ in range(20)])
    assert peak["capped"] == 2 and peak["free"] <= 4
    assert Counter(done) == {"capped": 20, "free": 20}
    assert slots.free == 4 and slots.waiting == 0


async def test_a_cancelled_wait_takes_no_slot() -> None:
    """A waiter cancelled while queued (its partition moved) leaves no slot taken and no
    entry behind; the next waiter gets the slot freed after it."""
    slots = FairSlots(1)
    await slots.take("a")
    cancelled = asyncio.create_task(slots.take("b"))
    later = asyncio.create_task(slots.take("c"))
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.gather(cancelled, return_exceptions=True)
    slots.give_back("a")
    await asyncio.wait_for(later, 1)
    assert slots.held("c") == 1 and slots.held("b") == 0 and slots.waiting == 0
    slots.give_back("c")
    assert slots.free == 1


# --- the settings ----------------------------------------------------------------------------


@given(st.text(max_size=60))
def test_plan_numbers_refuse_with_a_reason_or_accept(text: str) -> None:
    """Any text given as ``PLAN_WEIGHTS`` either reads as plans with finite numbers > 0 or is
    refused with a ``ValueError`` naming what is wrong; nothing else is raised."""
    for whole in (False, True):
        try:
            found = plan_numbers(text, whole=whole)
        except ValueError as exc:
            assert str(exc)
            continue
        for plan, number in found.items():
            assert plan and plan == plan.strip()
            assert 0 < number < float("inf")
            assert not whole or number == int(number)


def test_plan_settings_are_checked_at_start() -> None:
    """A bad ``PLAN_MAX_IN_FLIGHT`` is a bad setting named as such, not a failure at a turn."""
    ok = Settings(plan_weights="free=1, pro=4", plan_max_in_flight="free=2")
    assert ok.plan_weight_map() == {"free": 1.0, "pro": 4.0}
    assert ok.plan_cap_map() == {"free": 2}
    with pytest.raises(ValueError, match="plan_max_in_flight"):
        Settings(plan_max_in_flight="free=1.5")


# --- one consumer, several workspaces --------------------------------------------------------

PART = TopicPartition("in", 0)  # one partition: the flood's records come first in it
PLANS = {"flood": "free", "quiet": "pro", "other": "pro"}


class WorkspaceAgent:
    """Answers each conversation with its own count and the ids it saw; notes how many turns of
    each workspace run at once and the order turns ran in."""

    def __init__(self, turn_s: float = 0.002,
                 start_when: Callable[[], bool] | None = None) -> None:
        self.turn_s = turn_s
        # Turns wait until ``start_when()`` first holds: a test that compares how turns are
        # ordered starts them once every conversation's worker has asked for a slot, so the
        # order is the fair queue's and not how quickly the workers got to it.
        self.start_when = start_when
        self.running: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.order: list[str] = []

    async def turn(self, request: dict[str, Any]) -> dict[str, Any]:
        session_id = request["session_id"]
        workspace = session_id.split("-")[0]
        self.running[workspace] += 1
        self.peak[workspace] = max(self.peak[workspace], self.running[workspace])
        if self.start_when is not None:
            await until(self.start_when, "every conversation waits for a slot")
            self.start_when = None
        await asyncio.sleep(self.turn_s)
        self.running[workspace] -= 1
        self.order.append(session_id)
        state = dict(request["session"] or {"id": session_id, "n": 0, "seen": []})
        state["n"] += 1
        state["seen"] = [*state["seen"], request["id"]]
        return {
            "session": state,
            "messages": [{"kind": "ai", "text": f"{session_id}:{request['id']}",
                          "key": f"k{state['n']}"}],
            "outcomes": [],
            "llm_calls": 1,
        }


class WorkspaceRouter:
    """Routes a conversation by its id's prefix to that workspace's agent and plan."""

    def __init__(self, agent: WorkspaceAgent) -> None:
        self._agent = agent

    async def route(self, parsed: Any, state: dict[str, Any] | None) -> Route:
        workspace = parsed.session_id.split("-")[0]
        return Route(agent=self._agent, agent_id=f"agent-{workspace}", workspace=workspace,
                     binding={"agent_id": f"agent-{workspace}", "workspace": workspace},
                     plan=PLANS[workspace])


def service_for(consumer: FakeKafkaConsumer, agent: WorkspaceAgent, store: FakeStore,
                producer: FakeProducer, budget: Any = None, **options: Any) -> ConsumerService:
    options.setdefault("max_buffered_records", 5000)
    settings = Settings(kafka_bootstrap_servers="127.0.0.1:1", merge_bursts=False, **options)
    publisher = OutboxPublisher(store, producer)  # type: ignore[arg-type]
    pipeline = TurnPipeline(
        store=store, agent=agent, publisher=publisher,  # type: ignore[arg-type]
        topics=OutboundTopics(messages="out.m", schedule="out.s"),
        router=WorkspaceRouter(agent),
    )
    clients = fake_clients(consumer, store, producer, pipeline, budget=budget)
    service = ConsumerService(settings, agent, clients=clients)  # type: ignore[arg-type]
    service.parts.handover.assigned({PART})
    return service


class OneConsumer:
    """One consumer on ``PART`` with the fakes around it: the set-up every test below shares.
    ``start`` builds the service with the settings a test needs, ``running`` runs its fetch
    loop (stopped and awaited on the way out)."""

    def __init__(self) -> None:
        self.consumer = FakeKafkaConsumer([PART])
        self.agent = WorkspaceAgent()
        self.store = FakeStore()
        self.producer = FakeProducer()
        self.service: ConsumerService | None = None

    def start(self, agent: WorkspaceAgent | None = None, **options: Any) -> ConsumerService:
        if agent is not None:
            self.agent = agent
        self.service = service_for(self.consumer, self.agent, self.store, self.producer,
                                   **options)
        return self.service

    def committed(self) -> int | None:
        return self.consumer.committed(PART)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ConsumerService]:
        assert self.service is not None, "start() first"
        loop = asyncio.create_task(self.service.parts.intake.fetch_loop())
        try:
            yield self.service
        finally:
            self.service.stop()
            await loop

    async def until_committed(self, count: int) -> None:
        """Run until ``count`` inputs of the partition are committed."""
        async with self.running():
            await until(lambda: self.committed() == count, "every input is committed",
                        within=30)

    def check(self, sessions: list[str], per_session: int) -> None:
        check_nothing_crossed(self.store, self.producer, sessions, per_session)


@pytest.fixture
def one() -> OneConsumer:
    return OneConsumer()


def enqueue(consumer: FakeKafkaConsumer, sessions: list[str], per_session: int) -> None:
    for n in range(per_session):
        for session_id in sessions:
            body = {"session_id": session_id, "message": f"t{n}", "id": f"m{n}"}
            consumer.append(PART, session_id.encode(), json.dumps(body).encode())


def check_nothing_crossed(
    store: FakeStore, producer: FakeProducer, sessions: list[str], per_session: int
) -> None:
    """Each conversation got exactly its own replies, once, in order, and its state holds only
    its own inputs."""
    by_key: dict[bytes | None, list[str]] = defaultdict(list)
    for _, key, value in producer.sent:
        by_key[key].append(json.loads(value)["text"])
    for session_id in sessions:
        expected = [f"{session_id}:m{n}" for n in range(per_session)]
        assert by_key[session_id.encode()] == expected
        state, version = store.sessions[session_id]
        assert state["seen"] == [f"m{n}" for n in range(per_session)]
        assert state["metadata"]["agent"]["workspace"] == session_id.split("-")[0]
        assert version == per_session


async def test_a_flood_in_the_same_partition_does_not_hold_back_other_workspaces(
    one: OneConsumer,
) -> None:
    """Forty conversations of one workspace flood a partition with 400 inputs ahead of six
    quiet conversations of two other workspaces: with two turn slots taken fairly, the quiet
    conversations are all answered while most of the flood still waits, every conversation is
    answered in order with only its own replies, and the partition is committed to its end."""
    flood = [f"flood-{i}" for i in range(40)]
    quiet = [f"quiet-{i}" for i in range(3)] + [f"other-{i}" for i in range(3)]
    # The two first turns hold their slots until the 44 other conversations wait for one.
    one.start(WorkspaceAgent(start_when=lambda: one.service is not None
                             and one.service.parts.slots.fair.waiting >= 44), max_in_flight=2)
    enqueue(one.consumer, flood, 10)
    enqueue(one.consumer, quiet, 3)
    await one.until_committed(418)
    last_quiet = max(i for i, s in enumerate(one.agent.order) if not s.startswith("flood"))
    # 18 quiet turns, alternating with the flood (one turn of each of the three workspaces in
    # turn), after the two first flood turns: done within the first 2 + 3 x 9 = 29 of 418.
    assert last_quiet < 29, last_quiet
    one.check(flood, 10)
    one.check(quiet, 3)


async def test_a_new_customer_of_the_flooding_workspace_is_answered_before_its_flood(
    one: OneConsumer,
) -> None:
    """A hundred and fifty conversations of one workspace queue three inputs each on one
    partition, two turn slots; once every one of them had a turn, a new customer of the same
    workspace writes. Its turn runs within a few turns of its record being read, not after
    one turn of each of the hundred and fifty (round robin); everything is answered once, in
    order, with nothing crossed."""
    one.start(WorkspaceAgent(turn_s=0.01), max_in_flight=2)
    flood = [f"flood-{i}" for i in range(150)]
    enqueue(one.consumer, flood, 3)
    async with one.running():
        await until(lambda: len(one.agent.order) >= 160, "every flood conversation had a turn",
                    within=30)
        assert one.service is not None
        one.consumer.append(PART, b"flood-new", json.dumps(
            {"session_id": "flood-new", "message": "oi", "id": "m0"}).encode())
        queues = one.service.parts.workers.queues
        await until(lambda: queues.is_active("flood-new"), "the new record is read")
        read_at = len(one.agent.order)
        await until(lambda: one.committed() == 451, "every input is committed", within=30)
    ran_at = one.agent.order.index("flood-new")
    # Read, it waits for the two turns running then and its own load: a handful of turns.
    assert ran_at - read_at <= 8, (read_at, ran_at)
    one.check(flood, 3)
    one.check(["flood-new"], 1)


async def test_a_plans_cap_holds_its_workspace_to_its_turns_in_flight(one: OneConsumer) -> None:
    """With the flood's plan capped at one turn in flight (of four slots), it never runs two at
    once; its turns wait, none is dropped or dead-lettered, each is answered once, in order,
    and the wait is counted under its plan's label."""
    before = metrics.PLAN_CAP_WAITS.labels(plan="free")._value.get()
    service = one.start(max_in_flight=4, plan_max_in_flight="free=1", plan_weights="pro=2")
    flood = [f"flood-{i}" for i in range(10)]
    quiet = [f"quiet-{i}" for i in range(4)]
    enqueue(one.consumer, flood, 5)
    enqueue(one.consumer, quiet, 5)
    await one.until_committed(70)
    assert one.agent.peak["flood"] == 1
    assert one.agent.peak["quiet"] > 1
    one.check(flood, 5)
    one.check(quiet, 5)
    assert metrics.PLAN_CAP_WAITS.labels(plan="free")._value.get() > before
    assert service.parts.slots.fair.free == 4


async def test_a_turn_held_by_its_plans_cap_keeps_its_wait_for_the_inspector(
    one: OneConsumer,
) -> None:
    """A turn that waited because its plan's cap was reached carries the wait (milliseconds,
    the plan's label, ``plan-cap``) into what its turn log keeps for ``turnflow inspect``; a
    turn of the uncapped workspace is never marked as held by a cap."""
    service = one.start(max_in_flight=4, plan_max_in_flight="free=1")
    pipeline = service.parts.runtime.pipeline
    admitted: list[tuple[TurnWork, Admission]] = []
    apply = pipeline.apply

    async def noting(work: TurnWork, **options: Any) -> Any:
        take = options["before_turn"]

        async def before_turn(route: Any) -> Admission:
            admission = await take(route)
            admitted.append((work, admission))
            return admission

        return await apply(work, **{**options, "before_turn": before_turn})

    pipeline.apply = noting  # type: ignore[method-assign]
    flood = [f"flood-{i}" for i in range(8)]
    quiet = [f"quiet-{i}" for i in range(4)]
    enqueue(one.consumer, flood, 3)
    enqueue(one.consumer, quiet, 3)
    await one.until_committed(36)
    held = [(w, a.queued) for w, a in admitted if a.queued and "plan-cap" in a.queued["why"]]
    assert held, "no turn of the capped workspace recorded its wait"
    assert {w.parsed.session_id.split("-")[0] for w, _ in held} == {"flood"}
    for work, queued in held:
        assert queued["plan"] == "free" and queued["waited_ms"] >= 1
        assert delivery(dataclasses.replace(work, queued=queued))["queued"] == queued
    one.check(flood, 3)


@settings(deadline=None, max_examples=10)
@given(st.lists(st.tuples(st.sampled_from(["flood", "quiet", "other"]), st.integers(0, 7)),
                min_size=1, max_size=60))
def test_any_mix_of_workspaces_in_one_partition_is_answered_once_in_order(
    arrivals: list[tuple[str, int]]
) -> None:
    """Inputs of conversations of three workspaces arriving in any interleaving on one
    partition are each answered once, in each conversation's order, with nothing crossing."""

    async def scenario() -> None:
        consumer = FakeKafkaConsumer([PART])
        agent, store, producer = WorkspaceAgent(), FakeStore(), FakeProducer()
        service = service_for(consumer, agent, store, producer, max_in_flight=3,
                              plan_max_in_flight="free=1")
        counts: Counter[str] = Counter()
        for workspace, conversation in arrivals:
            session_id = f"{workspace}-{conversation}"
            body = {"session_id": session_id, "message": "t", "id": f"m{counts[session_id]}"}
            counts[session_id] += 1
            consumer.append(PART, session_id.encode(), json.dumps(body).encode())
        loop = asyncio.create_task(service.parts.intake.fetch_loop())
        try:
            await until(lambda: consumer.committed(PART) == len(arrivals), "all committed",
                        within=30)
        finally:
            service.stop()
            await loop
        for session_id, count in counts.items():
            check_nothing_crossed(store, producer, [session_id], count)

    asyncio.run(scenario())


def test_a_partition_pauses_at_its_share_of_bytes_before_its_share_of_records() -> None:
    """Few large records pause their partition at its share of ``MAX_BUFFERED_BYTES`` though
    far under its share of records; it resumes once under half of both, and the watermarks
    count the bytes of pending records only."""
    from consumer.turns.backpressure import Backpressure
    from consumer.turns.watermarks import OffsetWatermarks

    big, small = TopicPartition("in", 0), TopicPartition("in", 1)
    marks: OffsetWatermarks[TopicPartition] = OffsetWatermarks()
    rules: Backpressure[TopicPartition] = Backpressure(100, byte_limit=1000)
    for offset in range(5):
        marks.track(big, offset, 100)
    marks.track(small, 0, 10)
    moves = rules.update({big, small}, marks.pending_count, marks.pending_bytes)
    assert moves.pause == {big} and marks.pending_bytes() == 510
    for offset in range(3):
        marks.done(big, offset)
    assert marks.pending_bytes(big) == 200
    moves = rules.update({big, small}, marks.pending_count, marks.pending_bytes)
    assert moves.resume == {big} and rules.paused == frozenset()
    marks.forget([big])
    assert marks.pending_bytes() == 10


class MinuteBudget:
    """``store.model_budget.ModelBudget`` in memory, with a "minute" of ``minute_s``."""

    def __init__(self, minute_s: float) -> None:
        self._minute_s = minute_s
        self.taken: Counter[tuple[str, int]] = Counter()
        self.takes = 0  # statements the real one would have run

    def _minute(self) -> tuple[int, float]:
        now = asyncio.get_running_loop().time()
        return int(now // self._minute_s), self._minute_s - now % self._minute_s

    async def take_many(self, workspace: str, per_minute: int, wanted: int) -> tuple[int, float]:
        self.takes += 1
        minute, left = self._minute()
        if self.taken[workspace, minute] + wanted > per_minute:
            return 0, left
        self.taken[workspace, minute] += wanted
        return wanted, left

    async def prune(self) -> int:
        return 0


async def test_a_plans_per_minute_budget_makes_its_turns_wait_for_the_next_minute(
    one: OneConsumer,
) -> None:
    """With the flood's plan at three model turns a "minute" (0.3 s here), its thirty turns
    spread over ten minutes, at most three in each; none is dropped or answered twice, each
    conversation stays in order, the quiet workspace (no budget) is answered meanwhile, and
    the waits are counted under the plan's label."""
    before = metrics.PLAN_MINUTE_WAITS.labels(plan="free")._value.get()
    budget = MinuteBudget(0.3)
    one.start(max_in_flight=4, plan_model_turns_per_minute="free=3", budget=budget)
    flood = [f"flood-{i}" for i in range(6)]
    quiet = [f"quiet-{i}" for i in range(3)]
    enqueue(one.consumer, flood, 5)
    enqueue(one.consumer, quiet, 2)
    async with one.running():
        await until(lambda: all(
            len([1 for _, k, _ in one.producer.sent if k == s.encode()]) == 2 for s in quiet
        ), "the quiet workspace is answered")
        assert sum(1 for s in one.agent.order if s.startswith("flood")) < 30
        await until(lambda: one.committed() == 36, "every input is committed", within=30)
    per_minute = [n for (w, _), n in budget.taken.items() if w == "flood"]
    assert sum(per_minute) == 30 and max(per_minute) <= 3
    one.check(flood, 5)
    one.check(quiet, 2)
    assert metrics.PLAN_MINUTE_WAITS.labels(plan="free")._value.get() > before


async def test_a_busy_workspace_takes_its_minute_budget_a_few_turns_at_a_time(
    one: OneConsumer,
) -> None:
    """Far under its cap, a workspace's turns are counted in takes of several (one statement
    for many turns), every turn run is counted, and no minute counts more than the cap."""
    budget = MinuteBudget(60)
    one.start(max_in_flight=8, plan_model_turns_per_minute="free=100000", budget=budget)
    flood = [f"flood-{i}" for i in range(40)]
    enqueue(one.consumer, flood, 10)
    async with one.running():
        await until(lambda: one.committed() == 400, "every input is committed", within=30)
    one.check(flood, 10)
    counted = sum(n for (w, _), n in budget.taken.items() if w == "flood")
    assert 400 <= counted <= 400 + 8 * LEASE_MAX
    assert budget.takes < 400 / 4, budget.takes


def test_a_lease_runs_turns_within_its_minute_and_asks_for_its_pace() -> None:
    """A lease of five runs four more turns (the first ran on its take), none once its minute
    ended; the next take asks for what the pace of the last one fills in ``LEASE_S``, within
    one and the bounds (``LEASE_MAX``, a ``LEASE_SHARE``-th of the cap)."""
    lease = MinuteLease(5, taken_at=10.0, until=40.0)
    assert [lease.use(10.1) for _ in range(5)] == [True] * 4 + [False]
    assert not MinuteLease(5, taken_at=10.0, until=40.0).use(40.0)
    assert lease.wanted(10.5, 100_000) == int(5 / 0.5 * LEASE_S)  # 10 a second
    assert lease.wanted(10.0001, 100_000) == LEASE_MAX
    assert lease.wanted(10.0001, 100) == 100 // LEASE_SHARE
    assert lease.wanted(70.0, 100_000) == 1  # idle for a minute: one at a time again


# --- the model's own limits ------------------------------------------------------------------


def test_the_shared_backoff_follows_rate_limit_answers_only() -> None:
    """A 429 or a retryable answer with a hint sets the back-off (the hint, else the first
    retry delay, capped); a later, shorter one never shortens it; other failures, fatal answers
    and unusable replies leave it alone."""
    from consumer.turns.model_backoff import SharedBackoff
    from engine import ProviderError, UnusableReply

    backoff = SharedBackoff(first_delay_s=0.5, max_s=30)
    assert backoff.note(ProviderError("x", kind="retryable", status=503), 0) is None
    assert backoff.note(ProviderError("x", kind="fatal", status=429), 0) is None
    assert backoff.note(UnusableReply("x"), 0) is None
    assert backoff.note(ValueError("x"), 0) is None
    assert backoff.remaining(0) == 0
    assert backoff.note(ProviderError("x", kind="retryable", status=429), 10) == 0.5
    assert backoff.note(ProviderError("x", kind="retryable", retry_after=5), 10) == 5
    assert backoff.note(ProviderError("x", kind="retryable", status=429, retry_after=1), 11) is None
    assert backoff.remaining(12) == 3
    assert backoff.note(ProviderError("x", kind="retryable", retry_after=3600), 12) == 30


class RateLimitedAgent(WorkspaceAgent):
    """The flood's first turn is answered 429 with a wait; notes when every turn started."""

    def __init__(self, wait_s: float) -> None:
        super().__init__()
        self._wait_s = wait_s
        self.limited_at: float | None = None
        self.starts: list[tuple[float, str]] = []

    async def turn(self, request: dict[str, Any]) -> dict[str, Any]:
        from engine import ProviderError

        now = asyncio.get_running_loop().time()
        self.starts.append((now, request["session_id"]))
        if self.limited_at is None and request["session_id"].startswith("flood"):
            self.limited_at = now
            raise ProviderError("slow down", kind="retryable", status=429,
                                retry_after=self._wait_s)
        return await super().turn(request)


async def test_a_rate_limit_answer_holds_every_conversation_back_once(one: OneConsumer) -> None:
    """After one 429 with a 0.4 s hint, no turn of any conversation or workspace starts until
    the hint has passed (bar the one already running); then the flood's retry and the quiet
    workspace's first turns run, every input answered once, in order, nothing dead-lettered."""
    before = metrics.MODEL_BACKOFFS._value.get()
    agent = RateLimitedAgent(0.4)
    one.start(agent, max_in_flight=2)
    flood = [f"flood-{i}" for i in range(8)]
    quiet = [f"quiet-{i}" for i in range(3)]
    enqueue(one.consumer, flood, 3)
    enqueue(one.consumer, quiet, 2)
    await one.until_committed(30)
    assert agent.limited_at is not None
    after = [t for t, _ in agent.starts if t > agent.limited_at]
    early = [t for t in after if t < agent.limited_at + 0.4 - 0.02]
    assert len(early) <= 1, early  # only a turn that had its slot before the answer came
    quiet_starts = [t for t, s in agent.starts if s.startswith("quiet")]
    assert quiet_starts and min(quiet_starts) < max(t for t, s in agent.starts
                                                    if s.startswith("flood"))
    one.check(flood, 3)
    one.check(quiet, 2)
    assert metrics.MODEL_BACKOFFS._value.get() == before + 1
