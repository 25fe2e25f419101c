"""The example agents with customers who take their time: answers in any order, answers that
say nothing, many conversations at once. A customer who gives the values within the asks gets
booked; one who never does is told so, and no reply shows an empty value."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest

from engine import FakeClock
from engine.providers import RuleProvider
from examples import agente_pt, demo_agent
from tests.examples.host import Conversation, codes, texts

# An empty template value leaves a space before punctuation or two spaces in a row.
EMPTY_VALUE = re.compile(r" [.,!?]|  ")

BOOKING_ORDERS = [
    # (what the customer writes, the service and day that get booked)
    (["I want to book a repair", "brakes please", "not sure yet", "saturday", "yes"],
     ("brakes", "saturday")),
    (["I want to book a repair", "saturday", "brakes", "yes"], ("brakes", "saturday")),
    (["I want to book a repair", "hmm", "let me think", "a flat-tire fix", "on friday", "yes"],
     ("flat-tire", "friday")),
    (["book a repair", "tuesday please", "not sure", "a tune-up", "yes"], ("tune-up", "tuesday")),
    (["hi", "my name is Sam", "not sure", "tune-up", "monday", "yes"], ("tune-up", "monday")),
    (["hi", "my name is Ana", "brakes on wednesday", "yes"], ("brakes", "wednesday")),
    (["I need the brakes fixed on thursday", "yes"], ("brakes", "thursday")),
]


@pytest.fixture(autouse=True)
def _empty_books() -> Iterator[None]:
    demo_agent.BOOKINGS.clear()
    agente_pt.RESERVAS.clear()
    yield
    demo_agent.BOOKINGS.clear()
    agente_pt.RESERVAS.clear()


def _demo(session_id: str = "s1") -> Conversation:
    clock = FakeClock("2026-01-05T09:00:00Z")
    return Conversation(demo_agent.build_agent(RuleProvider(), clock), clock, session_id)


def _pt(session_id: str = "s1") -> Conversation:
    clock = FakeClock("2026-01-05T09:00:00Z")
    return Conversation(agente_pt.build_agent(RuleProvider(), clock), clock, session_id)


async def _chat(chat: Conversation, lines: list[str]) -> list[str]:
    said: list[str] = []
    for line in lines:
        said += texts(await chat.say(line))
    return said


@pytest.mark.parametrize(("lines", "booked"), BOOKING_ORDERS)
async def test_the_demo_books_whichever_order_the_answers_come_in(
    lines: list[str], booked: tuple[str, str]
) -> None:
    """Service and day given in any order, with replies between that say nothing, are booked."""
    chat = _demo()
    said = await _chat(chat, lines)
    service, day = booked
    ref = chat.session.data["booking_ref"]
    assert f"So: {service} on {day}. Shall I book it?" in said
    assert said[-1].startswith(f"Booked: {service} on {day}, reference {ref}.")
    assert [(b["service"], b["day"]) for b in demo_agent.BOOKINGS.values()] == [booked]
    assert not [text for text in said if EMPTY_VALUE.search(text)]


async def test_the_first_chat_of_the_readme_books_the_repair() -> None:
    """The four lines that used to lose the day book brakes on saturday once "yes" is said."""
    chat = _demo()
    said = await _chat(chat, ["I want to book a repair", "brakes please", "not sure yet"])
    assert said[-1] == "Which day suits you, Monday to Saturday?"
    summary = await chat.say("saturday")
    assert texts(summary)[-1] == "So: brakes on saturday. Shall I book it?"
    assert "max-asks" not in [code for _, code in codes(summary)]


async def test_a_customer_who_never_says_stops_the_booking_without_empty_values() -> None:
    """After ANSWER_TURNS asks the booking gives up: no summary, no booking, a way back."""
    chat = _demo()
    lines = ["I want to book a repair"] + ["hmm"] * demo_agent.ANSWER_TURNS
    said = await _chat(chat, lines)
    assert said[-1].startswith("No problem. When you know what the bike needs")
    assert not [text for text in said if text.startswith(("So:", "Booked:", "Sorry"))]
    assert demo_agent.BOOKINGS == {}
    assert chat.session.runs == []
    assert not [text for text in said if EMPTY_VALUE.search(text)]


async def test_after_giving_up_the_customer_can_start_again_and_keep_what_was_said() -> None:
    """A service given before the booking gave up is kept; "book a repair" asks only the day."""
    chat = _demo()
    silent = ["hmm"] * (demo_agent.ANSWER_TURNS - 1)
    await _chat(chat, ["I want to book a repair", "brakes", *silent])
    assert chat.session.data["service"] == "brakes" and "day" not in chat.session.data
    again = await chat.say("book a repair")
    assert texts(again) == ["Which day suits you, Monday to Saturday?"]
    said = await _chat(chat, ["friday", "yes"])
    assert said[-1].startswith("Booked: brakes on friday")


async def test_a_confirmation_never_given_books_nothing() -> None:
    """Replies that are neither yes nor no at the summary end unbooked, never book by default."""
    chat = _demo()
    await _chat(chat, ["I want to book a repair", "brakes on monday"])
    # The summary's question is the first ask; its answer and each re-ask's answer are read.
    said = await _chat(chat, ["hmm", "well", "maybe", "hmm"])
    assert said[-1].startswith("I'll leave it unbooked for now.")
    assert demo_agent.BOOKINGS == {}
    assert "booking_ref" not in chat.session.data


async def test_a_customer_who_gives_no_name_is_not_greeted_with_an_empty_one() -> None:
    """The welcome's name step gives up after its asks and offers the booking without a name."""
    chat = _demo()
    said = await _chat(chat, ["hi", "no thanks", "not telling", "nope"])
    assert "name" not in chat.session.data
    assert said[-2:] == [
        "No problem, let's get your bike booked.",
        "Which service does the bike need: a tune-up, a flat-tire fix or brakes?",
    ]
    assert not [text for text in said if text.startswith("Nice to meet you")]
    assert not [text for text in said if EMPTY_VALUE.search(text)]


async def test_fifty_conversations_at_once_each_book_their_own_repair() -> None:
    """Fifty sessions interleaved turn by turn each say exactly what their script says alone
    and book their own service and day under their own reference; nothing of one reaches
    another."""
    solo: list[list[str]] = []
    for lines, _ in BOOKING_ORDERS:
        alone = _demo("alone")
        solo.append(_without_refs(await _chat(alone, lines), alone))
    demo_agent.BOOKINGS.clear()

    chats = [_demo(f"s-{i}") for i in range(50)]
    scripts = [BOOKING_ORDERS[i % len(BOOKING_ORDERS)] for i in range(50)]
    said: list[list[str]] = [[] for _ in chats]
    for turn in range(max(len(lines) for lines, _ in scripts)):
        todo = [(i, lines[turn]) for i, (lines, _) in enumerate(scripts) if turn < len(lines)]
        results = await asyncio.gather(*(chats[i].say(line) for i, line in todo))
        for (i, _), result in zip(todo, results, strict=True):
            said[i] += texts(result)
    refs = [chat.session.data["booking_ref"] for chat in chats]
    assert len(set(refs)) == 50
    books = {b["ref"]: (b["service"], b["day"]) for b in demo_agent.BOOKINGS.values()}
    assert len(books) == 50
    for i, chat in enumerate(chats):
        assert _without_refs(said[i], chat) == solo[i % len(BOOKING_ORDERS)]
        assert books[refs[i]] == scripts[i][1]
    # Every conversation waits on its own timers: no timer key is shared by two of them.
    timer_sets = [set(chat.timers) for chat in chats]
    assert all(timer_sets)
    assert len(set().union(*timer_sets)) == sum(len(keys) for keys in timer_sets)
    for i, chat in enumerate(chats):
        paid = await chat.event("paid", {"amount": 45})
        assert texts(paid) == [f"Payment received, thank you! See you on {scripts[i][1][1]}."]


def _without_refs(said: list[str], chat: Conversation) -> list[str]:
    ref = chat.session.data.get("booking_ref")
    return [text.replace(ref, "<ref>") if ref else text for text in said]


@pytest.mark.parametrize(
    ("lines", "period", "email"),
    [
        (["quero marcar uma avaliação", "de manhã", "ainda não sei", "joana@example.com"],
         "manhã", "joana@example.com"),
        (["quero marcar uma avaliação", "ana@example.com", "talvez", "à tarde"],
         "tarde", "ana@example.com"),
        (["oi", "meu nome é Joana", "não sei", "de tarde", "jo@example.com"],
         "tarde", "jo@example.com"),
    ],
)
async def test_the_portuguese_agent_books_whichever_order(
    lines: list[str], period: str, email: str
) -> None:
    """Period and e-mail in any order, with empty replies between, make one reservation."""
    chat = _pt()
    said = await _chat(chat, lines)
    assert said[-1] == (
        f"Pronto! Sua avaliação ficou para o período da {period}. A confirmação vai para {email}."
    )
    assert list(agente_pt.RESERVAS.values()) == [{"periodo": period, "email": email}]


async def test_the_portuguese_agent_gives_up_without_an_empty_period() -> None:
    """With no period after TENTATIVAS asks, nothing is reserved and no reply has a hole."""
    chat = _pt()
    said = await _chat(chat, ["quero marcar uma avaliação"] + ["hmm"] * agente_pt.TENTATIVAS)
    assert said[-1].startswith("Sem problema.")
    assert agente_pt.RESERVAS == {}
    assert not [text for text in said if "período da ." in text or EMPTY_VALUE.search(text)]
