"""The demo after a booking, and customers who answer out of order, correct themselves or send
several messages at once: it never books twice or confirms a payment twice, and it shows it
heard what was said. Engine alone, offline provider, fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta

import pytest

from engine import FakeClock, TurnResult
from engine.providers import RuleProvider
from examples import demo_agent
from tests.examples.host import Conversation, texts

PAID = "Payment received, thank you!"


@pytest.fixture(autouse=True)
def _empty_bookings() -> Iterator[None]:
    demo_agent.BOOKINGS.clear()
    yield
    demo_agent.BOOKINGS.clear()


def _demo(session_id: str = "s1") -> Conversation:
    clock = FakeClock("2026-01-05T09:00:00Z")
    return Conversation(demo_agent.build_agent(RuleProvider(), clock), clock, session_id)


async def _burst(chat: Conversation, *lines: str) -> TurnResult:
    """Several messages sent in a row, answered as one turn (as the consumer merges them)."""
    at = chat.clock.now() - timedelta(milliseconds=300)
    earlier = [{"message": text, "id": f"b{chat.inputs}-{i}", "at": at.isoformat()}
               for i, text in enumerate(lines[:-1])]
    chat.inputs += 1
    result = await chat._turn({"message": lines[-1], "id": f"m{chat.inputs}",
                               "at": at.isoformat(), "burst": earlier})
    chat.history.extend({"role": "user", "text": text} for text in lines)
    return chat._after(result)


async def _said(chat: Conversation, *lines: str) -> list[str]:
    out: list[str] = []
    for line in lines:
        out += texts(await chat.say(line))
    return out


async def _booked(chat: Conversation) -> str:
    """Book brakes on saturday straight away (the welcome never ran); the reference."""
    await chat.say("I need the brakes fixed on saturday")
    booked = texts(await chat.say("yes"))
    assert booked[0].startswith("Booked: brakes on saturday")
    return str(chat.session.data["booking_ref"])


@pytest.mark.parametrize("after", [["thanks!"], ["yes"], ["thanks!", "yes", "yes please"]])
async def test_thanks_or_yes_after_a_booking_books_nothing(after: list[str]) -> None:
    """After a booking, "thanks!" does not restart the welcome and re-offer the booking, and
    "yes" (again) books no second reference; one paid event confirms once."""
    chat = _demo()
    ref = await _booked(chat)
    said = await _said(chat, *after)
    assert not [t for t in said if t.startswith(("Hi! I'm Ana", "So:", "Booked:"))], said
    assert len(demo_agent.BOOKINGS) == 1 and chat.session.data["booking_ref"] == ref
    paid = texts(await chat.event("paid", {"amount": 45}))
    assert [t for t in paid if t.startswith(PAID)] == [f"{PAID} See you on saturday."]
    again = texts(await chat.event("paid", {"amount": 45}))
    assert again == []  # nothing waits for a second payment


async def test_a_second_repair_on_purpose_is_booked_from_scratch_after_the_first() -> None:
    """While the first booking waits for its payment a new request is told so (one booking at a
    time: one paid event never confirms two); once paid, a second repair is booked with its
    own service, day and reference, and its payment is confirmed once."""
    chat = _demo()
    first = await _booked(chat)
    early = await _said(chat, "I want to book another repair, a tune-up on monday")
    assert early == [f"Your booking {first} is waiting for its payment; once it is paid I can "
                     "book another repair."]
    assert len(demo_agent.BOOKINGS) == 1
    paid = texts(await chat.event("paid", {}))
    assert paid.count(f"{PAID} See you on saturday.") == 1
    second = await _said(chat, "I want to book another repair, a tune-up on monday")
    assert second[-1] == "So: tune-up on monday. Shall I book it?"
    booked = texts(await chat.say("yes"))
    assert booked[0].startswith("Booked: tune-up on monday, reference R-")
    refs = {b["ref"]: (b["service"], b["day"]) for b in demo_agent.BOOKINGS.values()}
    assert refs[first] == ("brakes", "saturday") and len(refs) == 2
    assert chat.session.data["booking_ref"] != first
    paid_again = texts(await chat.event("paid", {}))
    assert paid_again == [f"{PAID} See you on monday."]


async def test_a_day_given_before_the_service_is_heard() -> None:
    """"saturday would be best" while the service is asked: the reply says the day counted
    and asks for the service, and the booking then needs only the service."""
    chat = _demo()
    await _said(chat, "hi", "Sam")
    early = await _said(chat, "saturday would be best")
    assert early == ["Noted: saturday. Which service does the bike need: a tune-up, a "
                     "flat-tire fix or brakes?"]
    assert chat.session.data["day"] == "saturday"
    later = await _said(chat, "brakes please")
    assert later[-1] == "So: brakes on saturday. Shall I book it?"


async def test_a_day_offered_as_a_name_is_not_taken_for_one() -> None:
    """Asked for a name, "saturday would be best" is not a name: it is asked again."""
    chat = _demo()
    await chat.say("hi")
    again = await _said(chat, "saturday would be best")
    assert again == ["Could you tell me your first name?"]
    assert "name" not in chat.session.data


async def test_friday_instead_at_the_confirmation_asks_once() -> None:
    """"actually, friday instead" at the confirmation: the new booking is said and the
    confirmation asked once, not the summary's question and then the step's."""
    chat = _demo()
    await _said(chat, "I need the brakes fixed on saturday")
    changed = await _said(chat, "actually, friday instead")
    assert changed == ["Sure, friday then: brakes on friday.",
                       "Could you confirm the booking (yes or no)?"]
    assert sum(text.endswith("?") for text in changed) == 1
    booked = await _said(chat, "yes")
    assert booked[0].startswith("Booked: brakes on friday")


async def test_a_burst_keeps_the_name_and_answers_the_greeting() -> None:
    """"hi" / "my name is Lee" / "I need a flat tire fix" sent at once: the booking starts,
    the name is kept, the greeting is answered and what was heard is said."""
    chat = _demo()
    reply = texts(await _burst(chat, "hi", "my name is Lee", "I need a flat tire fix"))
    assert reply == ["Hi Lee! Noted: flat-tire. Which day suits you, Monday to Saturday?"]
    assert chat.session.data["name"] == "Lee"
    assert chat.session.data["service"] == "flat-tire"
    assert "Thank you, got it." not in reply


async def test_a_later_message_of_a_burst_corrects_an_earlier_one() -> None:
    """A burst that names two days is read as a model would: the later one stands."""
    chat = _demo()
    await chat.say("I need a tune-up")
    reply = texts(await _burst(chat, "saturday", "no wait, friday"))
    assert chat.session.data["day"] == "friday"
    assert reply[-1] == "So: tune-up on friday. Shall I book it?"


async def test_many_conversations_after_booking_each_book_and_are_confirmed_once() -> None:
    """Thirty conversations interleaved turn by turn: each books, says thanks and yes, pays,
    books a second repair on purpose and pays again; every one has exactly its two bookings
    and two confirmations, and no reference or reply of one reaches another."""
    chats = [_demo(f"s-{i}") for i in range(30)]
    services = demo_agent.SERVICES
    days = demo_agent.DAYS
    steps: list[tuple[str, str | None]] = [
        ("say", "I need the brakes fixed on saturday"), ("say", "yes"), ("say", "thanks!"),
        ("say", "yes"), ("event", None), ("say", "SECOND"), ("say", "yes"), ("event", None),
    ]
    said: list[list[str]] = [[] for _ in chats]
    for kind, line in steps:
        async def one(i: int, kind: str = kind, line: str | None = line) -> TurnResult:
            chat = chats[i]
            if kind == "event":
                return await chat.event("paid", {})
            if line == "SECOND":
                line = f"I want to book another repair, a {services[i % 2]} on {days[i % 5]}"
            assert line is not None
            return await chat.say(line)

        results = await asyncio.gather(*(one(i) for i in range(len(chats))))
        for i, result in enumerate(results):
            said[i] += texts(result)
    assert len(demo_agent.BOOKINGS) == 60
    for i in range(len(chats)):
        booked = [t for t in said[i] if t.startswith("Booked:")]
        assert len(booked) == 2, said[i]
        assert booked[1].startswith(f"Booked: {services[i % 2]} on {days[i % 5]}")
        assert sum(t.startswith(PAID) for t in said[i]) == 2
        own = {b["ref"] for k, b in demo_agent.BOOKINGS.items() if k.startswith(f"s-{i}/")}
        assert len(own) == 2 and all(any(ref in t for t in booked) for ref in own)
