"""The demo agent, run through the engine alone with the offline provider and a fake clock."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from engine import Agent, FakeClock
from engine.providers import RuleProvider
from examples import demo_agent
from examples.demo_agent import BOOKINGS, FLOWS, book_repair, build_agent
from tests.examples.host import Conversation, codes, texts


@pytest.fixture(autouse=True)
def _empty_bookings() -> Iterator[None]:
    BOOKINGS.clear()
    yield
    BOOKINGS.clear()


@pytest.fixture
def chat() -> Conversation:
    clock = FakeClock("2026-01-05T09:00:00Z")
    return Conversation(build_agent(RuleProvider(), clock), clock)


def _step_kinds() -> set[str]:
    kinds = set()
    for flow in FLOWS:
        for step in flow["steps"]:
            if "collect" in step:
                kinds.add("talk+collect")
            for kind in ("say", "do", "if"):
                if kind in step:
                    kinds.add(kind)
            if "wait" in step:
                kinds.add("wait:" + ("event" if "event" in step["wait"] else "timer"))
            if step.get("branches"):
                kinds.add("branch")
    return kinds


def test_the_module_agent_is_built_and_shows_every_step_kind() -> None:
    """`examples.demo_agent:agent` is an Agent whose flows use every step kind and a branch."""
    assert isinstance(demo_agent.agent, Agent)
    assert _step_kinds() == {
        "talk+collect", "say", "do", "if", "wait:timer", "wait:event", "branch"
    }
    triggers = {next(iter(t)) for flow in FLOWS for t in flow["on"]}
    assert {"message", "silence"} <= triggers
    assert demo_agent.FIELDS["service"]["enum"] == ["tune-up", "flat-tire", "brakes"]


async def test_a_booking_from_greeting_to_payment(chat: Conversation) -> None:
    """Greeting, name, service and day, confirmation, a booking and the paid event, in order."""
    hello = await chat.say("hi")
    assert texts(hello) == [
        "Hi! I'm Ana from Spoke & Chain bike repair.",
        "Could you tell me your first name?",
    ]
    assert hello.llm_calls <= 2

    named = await chat.say("my name is Sam")
    assert texts(named) == [
        "Nice to meet you, Sam.",
        "Which service does the bike need: a tune-up, a flat-tire fix or brakes?",
    ]
    assert chat.session.data["name"] == "Sam"

    asked = await chat.say("I need the brakes fixed on saturday")
    assert texts(asked)[-2:] == [
        "Brake jobs take about two hours; please bring the bike in the morning.",
        "So: brakes on saturday. Shall I book it?",
    ]
    assert ("brakes?", "if") in codes(asked)

    booked = await chat.say("yes")
    ref = chat.session.data["booking_ref"]
    assert texts(booked) == [
        f"Booked: brakes on saturday, reference {ref}. "
        "You can pay online now; I'll confirm when the payment arrives."
    ]
    assert booked.messages[0].after_ms == 1500
    assert [c for c in codes(booked) if c[1] in ("action-ok", "inline-delay", "waiting")] == [
        ("book", "action-ok"), ("breath", "inline-delay"), ("await_payment", "waiting")
    ]
    assert booked.llm_calls == 1  # the answer was read by the understand call; no speak needed
    assert [b["ref"] for b in BOOKINGS.values()] == [ref]

    paid = await chat.event("paid", {"amount": 45})
    assert texts(paid) == ["Payment received, thank you! See you on saturday."]
    assert paid.llm_calls == 0


async def test_no_at_the_confirmation_starts_the_booking_over(chat: Conversation) -> None:
    """The confirm step's branch takes a "no" back to the first question with answers cleared."""
    await chat.say("I want to book a repair")
    await chat.say("a tune-up on monday")
    declined = await chat.say("no")
    assert ("confirm", "branch") in codes(declined)
    assert texts(declined) == [
        "Which service does the bike need: a tune-up, a flat-tire fix or brakes?"
    ]
    assert not {"service", "day", "confirmed"} & set(chat.session.data)
    assert BOOKINGS == {}


async def test_silence_brings_one_follow_up(chat: Conversation) -> None:
    """After the assistant spoke, SILENCE_MS of quiet fires the nudge once, with no model call."""
    await chat.say("what are your opening hours?")
    fired = await chat.wait(demo_agent.SILENCE_MS / 1000)
    assert [(key.split(":")[:2], texts(result)) for key, result in fired] == [
        (["silence@s1", "nudge"], ["Still there? Just reply whenever you're ready."])
    ]
    assert fired[0][1].llm_calls == 0
    assert await chat.wait(demo_agent.SILENCE_MS / 1000 * 3) == []


async def test_unpaid_booking_says_so_when_the_wait_runs_out(chat: Conversation) -> None:
    """With no `paid` event before PAYMENT_WAIT_MS, the event wait's else branch speaks."""
    await chat.say("I want to book a repair")
    await chat.say("a tune-up on monday")
    await chat.say("yes")
    fired = await chat.wait(demo_agent.PAYMENT_WAIT_MS / 1000)
    said = [text for _, result in fired for text in texts(result)]
    assert "No payment yet; you can also pay when you drop the bike off." in said


def test_booking_is_idempotent_on_the_key() -> None:
    """One ``ctx.key`` in one session books once; another key or another session books anew."""
    ctx = SimpleNamespace(key="r1:book:1", session_id="s1", data={"name": "Sam"},
                          with_={"service": "brakes", "day": "friday"})
    first, second = book_repair(ctx), book_repair(ctx)
    assert first == second
    assert len(BOOKINGS) == 1
    other = book_repair(SimpleNamespace(key="r2:book:1", session_id="s1", data={},
                                        with_=ctx.with_))
    assert other != first and len(BOOKINGS) == 2
    elsewhere = book_repair(SimpleNamespace(key=ctx.key, session_id="s2", data={},
                                            with_=ctx.with_))
    assert elsewhere not in (first, other) and len(BOOKINGS) == 3


def test_booking_refuses_values_outside_the_enums() -> None:
    """The action fails (and the flow takes on_fail) rather than book an unknown service."""
    result: Any = book_repair(
        SimpleNamespace(key="k", session_id="s1", data={},
                        with_={"service": "paint", "day": "friday"})
    )
    assert result.kind == "failed"
    assert BOOKINGS == {}


def test_silence_delay_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """TURNFLOW_DEMO_SILENCE_MS sets the nudge's silence, so a demo can make it short."""
    monkeypatch.setenv("TURNFLOW_DEMO_SILENCE_MS", "1234")
    try:
        reloaded = importlib.reload(demo_agent)
        nudge = next(f for f in reloaded.FLOWS if f["id"] == "nudge")
        assert nudge["on"][0]["silence"] == 1234
    finally:
        monkeypatch.delenv("TURNFLOW_DEMO_SILENCE_MS")
        importlib.reload(demo_agent)


async def test_a_changed_day_at_the_confirmation_is_confirmed_again(chat: Conversation) -> None:
    """"Actually friday" at the confirmation: the day is corrected (named, not valued, in the
    outcome), the booking is said again with the new day and confirmed with one question (not
    the summary's and then the step's); "yes" then books friday."""
    await chat.say("I want to book a repair")
    await chat.say("a tune-up on monday")
    changed = await chat.say("actually make it friday")
    assert chat.session.data["day"] == "friday"
    assert ("confirm", "corrected") in codes(changed)
    assert all("friday" not in (o.detail or "") for o in changed.outcomes)
    assert texts(changed) == ["Sure, friday then: tune-up on friday.",
                              "Could you confirm the booking (yes or no)?"]
    assert changed.llm_calls <= 2
    booked = await chat.say("yes")
    assert texts(booked)[0].startswith("Booked: tune-up on friday")
