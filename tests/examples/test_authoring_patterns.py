"""The authoring patterns docs/agents.md shows, run as written: a customer corrects a value
through a change flow, and a silence follow-up stays quiet while a flow waits on its timer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from engine import Agent, FakeClock
from engine.providers import RuleProvider
from examples import demo_agent
from tests.examples.host import Conversation, texts

PIZZA_FIELDS: dict[str, Any] = {
    "topping": {"type": "string", "enum": ["pepperoni", "veggie", "margherita"],
                "ask": "Which topping: pepperoni, veggie or margherita?"},
}

PIZZA_FLOWS: list[dict[str, Any]] = [
    {"id": "order", "on": [{"message": ["order a pizza", "pizza"]}],
     "steps": [{"id": "what", "collect": ["topping"]},
               {"id": "have?", "if": {"known": "topping"}, "then": "oven", "else": "end"},
               {"id": "oven", "say": "Your {{topping}} pizza is in the oven."},
               {"id": "bake", "wait": {"ms": 600_000}},
               {"id": "ready", "say": "Your {{topping}} pizza is ready!"}]},
    # The change flow of docs/agents.md, word for word.
    {"id": "change", "on": [{"message": ["change my order", "actually", "instead"]}],
     "clear_on_start": ["topping"],
     "steps": [{"id": "again", "collect": ["topping"]},
               {"id": "changed?", "if": {"known": "topping"}, "then": "changed", "else": "end"},
               {"id": "changed", "say": "Changed: {{topping}} it is."}]},
]


@pytest.fixture(autouse=True)
def _empty_bookings() -> Iterator[None]:
    demo_agent.BOOKINGS.clear()
    yield
    demo_agent.BOOKINGS.clear()


def _pizza() -> Conversation:
    clock = FakeClock("2026-01-05T09:00:00Z")
    agent = Agent(name="Pia", provider=RuleProvider(), clock=clock, fields=PIZZA_FIELDS,
                  flows=PIZZA_FLOWS)
    return Conversation(agent, clock)


async def test_without_a_change_flow_a_known_value_is_kept() -> None:
    """The rule the docs state: a known value is not read again, so a correction alone does
    nothing."""
    clock = FakeClock("2026-01-05T09:00:00Z")
    agent = Agent(name="Pia", provider=RuleProvider(), clock=clock, fields=PIZZA_FIELDS,
                  flows=PIZZA_FLOWS[:1])
    chat = Conversation(agent, clock)
    for line in ("I want to order a pizza", "pepperoni", "actually make it veggie"):
        await chat.say(line)
    assert chat.session.data["topping"] == "pepperoni"


async def test_a_change_flow_takes_the_new_value_from_the_same_message() -> None:
    """"actually make it veggie" starts the change flow, which forgets the topping and reads the
    new one from that message; the order waiting in the oven renders the new value."""
    chat = _pizza()
    await chat.say("I want to order a pizza")
    oven = await chat.say("pepperoni")
    assert texts(oven)[-1] == "Your pepperoni pizza is in the oven."
    changed = await chat.say("actually make it veggie")
    assert texts(changed)[-1] == "Changed: veggie it is."
    assert chat.session.data["topping"] == "veggie"
    fired = await chat.wait(600)
    assert [text for _, result in fired for text in texts(result)] == [
        "Your veggie pizza is ready!"
    ]


async def test_the_demo_nudge_stays_quiet_while_a_booking_waits_for_payment() -> None:
    """After the booking the run waits for the payment: SILENCE_MS of quiet brings no nudge;
    once the payment arrived, quiet after the next reply brings it again."""
    clock = FakeClock("2026-01-05T09:00:00Z")
    chat = Conversation(demo_agent.build_agent(RuleProvider(), clock), clock)
    for line in ("I want to book a repair", "a tune-up on monday", "yes"):
        await chat.say(line)
    assert chat.session.data["awaiting_payment"] is True
    quiet = await chat.wait(demo_agent.SILENCE_MS / 1000 * 2)
    assert [text for _, result in quiet for text in texts(result)] == []
    paid = await chat.event("paid", {"amount": 45})
    assert texts(paid) == ["Payment received, thank you! See you on monday."]
    assert "awaiting_payment" not in chat.session.data
    nudged = await chat.wait(demo_agent.SILENCE_MS / 1000 * 2)
    assert [text for _, result in nudged for text in texts(result)] == [
        "Still there? Just reply whenever you're ready."
    ]


async def test_an_unpaid_booking_clears_the_wait_too() -> None:
    """When the payment wait runs out, its own message comes and the flag is cleared."""
    clock = FakeClock("2026-01-05T09:00:00Z")
    chat = Conversation(demo_agent.build_agent(RuleProvider(), clock), clock)
    for line in ("I want to book a repair", "a tune-up on monday", "yes"):
        await chat.say(line)
    later = await chat.wait(demo_agent.PAYMENT_WAIT_MS / 1000)
    said = [text for _, result in later for text in texts(result)]
    assert said[0] == "No payment yet; you can also pay when you drop the bike off."
    assert "awaiting_payment" not in chat.session.data
