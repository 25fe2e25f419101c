"""The demo agent `turnflow dev` talks with: a bike-repair shop that books repairs.

It is small on purpose and still shows every piece of an agent (docs/agents.md walks through it):

- every step kind: talk with ``collect``, ``say``, ``do``, ``wait`` on a timer, ``wait`` on an
  event, and ``if``;
- a branch on the asking step (the customer says "no" to the summary: start the booking over);
- an event wait (``paid``, sent by the host; in the dev chat type ``/event paid``);
- a silence flow: after ``TURNFLOW_DEMO_SILENCE_MS`` of quiet (default 5 s) the assistant nudges
  the customer, once per conversation, without the customer doing anything, but not while a
  booking waits for its payment (the trigger's ``if``);
- a ``do`` action that is idempotent on ``ctx.key`` (a replayed input books nothing twice);
- fields with an ``enum`` (``service``, ``day``);
- a customer who takes a few turns to answer still gets booked, and a flow that gives up on a
  field never shows an empty value or calls the action without it (the guards below);
- a correction: ``day`` is ``correctable``, so "actually, Saturday" at the confirmation changes
  it and the confirm step's ``on_correction`` says the new booking and asks to confirm again
  (one question, not the summary's and the step's);
- one booking at a time: a booking made is done with its answers (the next starts from
  scratch), and while one waits for its payment a new request is told so instead of booking
  again, so one ``paid`` event never confirms two bookings; after a booking the welcome does
  not start over, so "thanks!" or another "yes" books nothing;
- the name is read wherever the customer gives it (``extract: anywhere``), so "hi / my name is
  Lee / I need a flat tire fix" sent at once keeps the name although it goes straight to the
  booking.

Every speak of a talk step that collects several fields counts one ask of *each* field still
missing, so a customer who answers one question at a time spends asks of the other. The
booking's fields therefore get a larger ``max_asks``, and every step that renders or acts on a
collected value sits behind an ``if`` that checks the value is known.

Several messages sent in a row before the answer (a burst) are answered as one turn by the
consumer; nothing in the agent is needed for that.

Flows with no talk step (``hours``, ``nudge``) cost zero model calls. The provider comes from the
environment (an OpenAI-compatible or Anthropic key), else the offline rule-based provider.

Use it as ``AGENT=examples.demo_agent:agent``.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from engine import Agent, Clock, failed, ok
from engine.providers import Provider, provider_from_env

SILENCE_MS = int(os.environ.get("TURNFLOW_DEMO_SILENCE_MS", "5000"))
"""Quiet time before the nudge; short so the demo shows a timer firing on its own."""

PAYMENT_WAIT_MS = int(os.environ.get("TURNFLOW_DEMO_PAYMENT_WAIT_MS", "120000"))
"""How long the booking waits for the ``paid`` event before it says payment is still open."""

SERVICES = ["tune-up", "flat-tire", "brakes"]
DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday"]

# The shop's booking book. A real action would call an API with ``ctx.key`` as its idempotency
# key; here the key is (part of) the dict key, so running the same step twice books once.
BOOKINGS: dict[str, dict[str, Any]] = {}


def book_repair(ctx: Any) -> Any:
    """Book the repair under ``ctx.key``; a second call with the same key returns the same ref."""
    service = ctx.with_.get("service")
    day = ctx.with_.get("day")
    if service not in SERVICES or day not in DAYS:
        return failed(f"cannot book {service!r} on {day!r}")
    # One book serves every customer: the session id keeps two customers' bookings apart
    # whatever form the run ids in ``ctx.key`` take.
    key = f"{ctx.session_id}/{ctx.key}"
    booking = BOOKINGS.get(key)
    if booking is None:
        ref = "R-" + hashlib.sha256(key.encode()).hexdigest()[:6].upper()
        # The name is optional: a customer who went straight to booking is booked under the
        # reference alone, so it is read from the data instead of passed as a None argument.
        name = (ctx.data or {}).get("name")
        booking = {"ref": ref, "service": service, "day": day, "name": name}
        BOOKINGS[key] = booking
    # ``awaiting_payment`` keeps the silence nudge away while the booking waits for the
    # payment; the payment wait's moves clear it.
    return ok(data={"booking_ref": booking["ref"], "awaiting_payment": True})


BOOKING_PHRASES = ["book a repair", "appointment", "fix my bike", "book", "repair", "brakes",
                   "flat tire", "tune-up"]

BOOKED_ANSWERS = ["service", "day", "confirmed"]
"""Cleared once a booking is made and its payment wait is over; an unfinished booking keeps
them, so "book a repair" later picks up where the customer left off."""

ANSWER_TURNS = 5
"""Asks of ``service`` and ``day`` before the booking gives up. Each speak of the ``what`` step
counts an ask of every field still missing, and the answer to the last ask is not read, so 5
leaves a customer four replies ("brakes please", "not sure yet", ...) to give both."""

FIELDS: dict[str, dict[str, Any]] = {
    "name": {"type": "string", "ask": "Ask for the customer's first name.",
             "extract": "anywhere"},
    "service": {
        "type": "string",
        "enum": SERVICES,
        "ask": "Which service does the bike need: a tune-up, a flat-tire fix or brakes?",
        "max_asks": ANSWER_TURNS,
    },
    # correctable: once known, a later message may still change it ("actually, Saturday").
    "day": {
        "type": "string",
        "enum": DAYS,
        "ask": "Which day suits you, Monday to Saturday?",
        "max_asks": ANSWER_TURNS,
        "correctable": True,
    },
    # Read from any message by the understand call, so the confirm step's branch can judge the
    # answer in code before anything is said.
    "confirmed": {
        "type": "boolean",
        "ask": "Ask them to confirm the booking (yes or no).",
        "extract": "anywhere",
    },
    "booking_ref": {"type": "string", "description": "Set by the booking action."},
    "awaiting_payment": {
        "type": "boolean",
        "description": "Set by the booking action, cleared when the payment wait ends.",
    },
}

FLOWS: list[dict[str, Any]] = [
    {
        "id": "welcome",
        "name": "Welcome",
        "description": "Anyone who writes without a clear request: greet, learn the name.",
        # Not after a booking: "thanks!" then must not greet and offer a booking again.
        "on": [{"message": [], "if": {"missing": "booking_ref"}}],
        "repeat": "once",
        "steps": [
            {"id": "hello", "say": "Hi! I'm Ana from Spoke & Chain bike repair.", "once": True},
            {"id": "ask_name", "collect": ["name"], "prompt": "Ask for their name, warmly."},
            # A customer may never give a name: greet by name only when there is one.
            {"id": "named?", "if": {"known": "name"}, "then": "offer", "else": "offer_unnamed"},
            # a move to another flow: the welcome hands over to the booking.
            # No question here: the booking's first step asks its own right after this line
            # (asked here too, a customer who gave the name in passing would get two).
            {"id": "offer", "say": "Nice to meet you, {{name}}.", "then": {"flow": "booking"}},
            # Reached when the name step gave up, on a turn with no reply spoken yet: the
            # booking's first step asks its own question right after this line.
            {"id": "offer_unnamed", "say": "No problem, let's get your bike booked.",
             "then": {"flow": "booking"}},
        ],
    },
    {
        "id": "booking",
        "name": "Book a repair",
        "description": "The customer wants a repair or service booked.",
        # One booking at a time: while one waits for its payment, ``one_at_a_time`` answers.
        "on": [{"message": BOOKING_PHRASES, "if": {"missing": "awaiting_payment"}}],
        "clear_on_start": ["confirmed", "booking_ref"],
        "steps": [
            {
                "id": "what",
                "collect": ["service", "day"],
                "prompt": "Help the customer book a repair; ask for what is still missing.",
            },
            # The step gives up on a field after max_asks: never summarise or book without both.
            {"id": "both_known?", "if": {"known": ["service", "day"]}, "then": "brakes?",
             "else": "not_yet"},
            # if: a brakes job needs a note before the summary.
            {"id": "brakes?", "if": {"equals": {"service": "brakes"}}, "then": "brakes_note",
             "else": {"step": "summary", "clear": ["confirmed"]}},
            {"id": "brakes_note",
             "say": "Brake jobs take about two hours; please bring the bike in the morning.",
             "then": {"step": "summary", "clear": ["confirmed"]}},
            {"id": "summary", "say": "So: {{service}} on {{day}}. Shall I book it?"},
            {
                "id": "confirm",
                "collect": ["confirmed"],
                "prompt": "Ask them to confirm the booking.",
                # a correction ("make it Saturday") says the new booking: re-confirm.
                "on_correction": {"step": "changed", "clear": ["confirmed"]},
                # branch: a "no" starts the booking over with the answers cleared; a "yes"
                # leaves nothing pending, so the step is done without a speak call.
                "branches": [
                    {
                        "if": {"equals": {"confirmed": False}},
                        "then": {"step": "what", "clear": ["service", "day", "confirmed"]},
                    }
                ],
            },
            # Only a "yes" books; a confirmation never given (max_asks) leaves it unbooked.
            {"id": "confirmed?", "if": {"equals": {"confirmed": True}}, "then": "book",
             "else": "not_confirmed"},
            # do: idempotent on ctx.key; a failure takes on_fail.
            {
                "id": "book",
                "do": "book_repair",
                "with": {"service": "{{service}}", "day": "{{day}}"},
                "on_fail": "book_failed",
            },
            # wait (timer): 1.5 s is short, so it rides on the next message as after_ms.
            {"id": "breath", "wait": {"ms": 1500}},
            {
                "id": "booked",
                "say": "Booked: {{service}} on {{day}}, reference {{booking_ref}}. "
                "You can pay online now; I'll confirm when the payment arrives.",
            },
            # wait (event): the host sends the `paid` event; else after PAYMENT_WAIT_MS.
            {
                "id": "await_payment",
                "wait": {"event": "paid", "up_to_ms": PAYMENT_WAIT_MS},
                "then": {"step": "paid", "clear": ["awaiting_payment"]},
                "else": {"step": "unpaid", "clear": ["awaiting_payment"]},
            },
            # A booking made is done with its answers: the next one starts from scratch.
            {"id": "paid", "say": "Payment received, thank you! See you on {{day}}.",
             "then": {"step": "done", "clear": BOOKED_ANSWERS}},
            {"id": "unpaid",
             "say": "No payment yet; you can also pay when you drop the bike off.",
             "then": {"step": "done", "clear": BOOKED_ANSWERS}},
            {"id": "not_yet",
             "say": "No problem. When you know what the bike needs and which day suits you, "
             "just write \"book a repair\" and we'll pick it up from there.",
             "then": "end"},
            {"id": "not_confirmed",
             "say": "I'll leave it unbooked for now. Write \"book a repair\" whenever you want "
             "to go ahead.",
             "then": "end"},
            {"id": "book_failed",
             "say": "Sorry, I could not book that just now. Someone from the shop will call you.",
             "then": "end"},
            # Ends the run: whichever way the condition goes (its move cleared the answers).
            {"id": "done", "if": {"known": "booking_ref"}, "then": "end", "else": "end"},
            # After a correction at the confirmation: the booking as it now stands, and the
            # confirm step asks its question once.
            {"id": "changed", "say": "Sure, {{day}} then: {{service}} on {{day}}.",
             "then": "confirm"},
        ],
    },
    {
        "id": "one_at_a_time",
        "name": "A booking already waits for its payment",
        "on": [{"message": BOOKING_PHRASES, "if": {"known": "awaiting_payment"}}],
        "steps": [{"id": "pending", "say": "Your booking {{booking_ref}} is waiting for its "
                   "payment; once it is paid I can book another repair."}],
    },
    {
        "id": "hours",
        "name": "Opening hours",
        "on": [{"message": ["opening hours", "when are you open", "hours"]}],
        "steps": [{"id": "hours", "say": "We're open Monday to Saturday, 9:00 to 18:00."}],
    },
    {
        "id": "nudge",
        "name": "Nudge after silence",
        # Not while a booking waits for its payment: it has its own timer and says when.
        "on": [{"silence": SILENCE_MS, "if": {"missing": "awaiting_payment"}}],
        "repeat": "once",
        "steps": [{"id": "nudge", "say": "Still there? Just reply whenever you're ready."}],
    },
]

def build_agent(provider: Provider | None = None, clock: Clock | None = None) -> Agent:
    """The demo agent; tests pass the offline provider and a fake clock."""
    return Agent(
        name="Ana",
        persona="Friendly front desk of a small bike-repair shop. Short, plain sentences.",
        goal="Book repairs and answer simple questions about the shop.",
        knowledge="Spoke & Chain repairs bikes: tune-ups, flat tires and brakes. "
        "Open Monday to Saturday, 9:00 to 18:00.",
        provider=provider if provider is not None else provider_from_env(),
        clock=clock,
        fields=FIELDS,
        flows=FLOWS,
        actions={"book_repair": book_repair},
        events={"paid": {}},
    )


agent = build_agent()

__all__ = ["ANSWER_TURNS", "BOOKINGS", "agent", "build_agent"]
