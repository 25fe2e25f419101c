"""Many customers on the demo agent at once: each gets their own booking and every reply."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from engine import FakeClock
from engine.providers import RuleProvider
from examples import demo_agent
from examples.delivery_worker import DeliveredKeys, DeliveryWorker
from tests.examples.host import Conversation

CUSTOMERS = [f"wa-55119{i:05d}" for i in range(6)]
SCRIPT = ["I want to book a repair", "a tune-up on monday", "yes"]


@pytest.fixture(autouse=True)
def _empty_bookings() -> Iterator[None]:
    demo_agent.BOOKINGS.clear()
    yield
    demo_agent.BOOKINGS.clear()


async def _book_all() -> dict[str, list[dict[str, Any]]]:
    """Every customer runs the same script, turn by turn interleaved; returns each customer's
    outbound messages as the consumer would publish them."""
    clock = FakeClock("2026-01-05T09:00:00Z")
    agent = demo_agent.build_agent(RuleProvider(), clock)
    chats = {c: Conversation(agent, clock, session_id=c) for c in CUSTOMERS}
    sent: dict[str, list[dict[str, Any]]] = {c: [] for c in CUSTOMERS}
    for line in SCRIPT:
        for customer, chat in chats.items():
            result = await chat.say(line)
            sent[customer] += [
                {"session_id": customer, "input_id": f"m{chat.inputs}", **m.model_dump(mode="json")}
                for m in result.messages
            ]
    for customer, chat in chats.items():
        assert chat.session.data.get("booking_ref"), customer
    return sent


async def test_every_customer_gets_their_own_booking() -> None:
    """Customers booking the same flow at once each get their own reference: the action's
    idempotency key names the conversation, so the booking API never hands one customer
    another's booking."""
    await _book_all()
    bookings = demo_agent.BOOKINGS  # looked up now: another test may have reloaded the module
    assert len(bookings) == len(CUSTOMERS)
    refs = [b["ref"] for b in bookings.values()]
    assert len(set(refs)) == len(CUSTOMERS)


async def test_a_delivery_worker_delivering_on_key_reaches_every_customer() -> None:
    """A delivery worker that dedupes on ``key`` alone delivers every reply of every customer
    once, and a republished batch (a crash between publish and commit) delivers nothing again."""
    sent = await _book_all()
    delivered: list[dict[str, Any]] = []

    async def deliver(value: dict[str, Any]) -> None:
        delivered.append(value)

    async def no_sleep(_: float) -> None:
        return None

    worker = DeliveryWorker(deliver, DeliveredKeys(), sleep=no_sleep)
    queues = [list(messages) for messages in sent.values()]
    interleaved: list[dict[str, Any]] = []
    while any(queues):
        interleaved += [queue.pop(0) for queue in queues if queue]
    for value in interleaved:
        await worker.handle(value)
    for customer in CUSTOMERS:
        assert len(sent[customer]) >= len(SCRIPT)
        got = [(m["key"], m["text"]) for m in delivered if m["session_id"] == customer]
        assert got == [(m["key"], m["text"]) for m in sent[customer]], customer
    before = len(delivered)
    for value in interleaved:
        assert await worker.handle(value) is False
    assert len(delivered) == before
