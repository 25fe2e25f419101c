"""The demo agent `turnflow dev` talks with: a bike-repair shop that books repairs.

It is small on purpose and still shows every piece of an agent (docs/agents.md walks through it):

- every step kind: talk with ``collect``, ``say``, ``do``, ``wait`` on a timer, ``wait`` on an
  event, and ``if``;
- a branch on the asking step (the customer says "no" to the summary: start the booking over);
- an event wait (``paid``, sent by the host; in the dev chat type ``/event paid``);
- a silence flow: after ``TURNFLOW_DEMO_SILENCE_MS`` of quiet (default 5 s) the assistant nudges
  the customer, once per conversation, without the customer doing anything;
- a ``do`` action that is idempotent on ``ctx.key`` (a replayed input books nothing twice);
- fields with an ``enum`` (``service``, ``day``);
- a correction: ``day`` is ``correctable``, so "actually, Saturday" at the confirmation changes
  it and the confirm step's ``on_correction`` goes back to the summary to confirm again.

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
# key; here the key is the dict key, so running the same step twice books once.
BOOKINGS: dict[str, dict[str, Any]] = {}


def book_repair(ctx: Any) -> Any:
    """Book the repair under ``ctx.key``; a second call with the same key returns the same ref."""
    service = ctx.with_.get("service")
    day = ctx.with_.get("day")
    if service not in SERVICES or day not in DAYS:
        return failed(f"cannot book {service!r} on {day!r}")
    booking = BOOKINGS.get(ctx.key)
    if booking is None:
        ref = "R-" + hashlib.sha256(ctx.key.encode()).hexdigest()[:6].upper()
        booking = {"ref": ref, "service": service, "day": day, "name": ctx.with_.get("name")}
        BOOKINGS[ctx.key] = booking
    return ok(data={"booking_ref": booking["ref"]})


FIELDS: dict[str, dict[str, Any]] = {
    "name": {"type": "string", "ask": "Ask for the customer's first name."},
    "service": {
        "type": "string",
        "enum": SERVICES,
        "ask": "Which service does the bike need: a tune-up, a flat-tire fix or brakes?",
    },
    # correctable: once known, a later message may still change it ("actually, Saturday").
    "day": {
        "type": "string",
        "enum": DAYS,
        "ask": "Which day suits you, Monday to Saturday?",
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
}

FLOWS: list[dict[str, Any]] = [
    {
        "id": "welcome",
        "name": "Welcome",
        "description": "Anyone who writes without a clear request: greet, learn the name.",
        "on": [{"message": []}],
        "repeat": "once",
        "steps": [
            {"id": "hello", "say": "Hi! I'm Ana from Spoke & Chain bike repair.", "once": True},
            {"id": "ask_name", "collect": ["name"], "prompt": "Ask for their name, warmly."},
            # a move to another flow: the welcome hands over to the booking.
            {"id": "offer",
             "say": "Nice to meet you, {{name}}. What does your bike need (a tune-up, a "
             "flat-tire fix or brakes), and which day suits you?",
             "then": {"flow": "booking"}},
        ],
    },
    {
        "id": "booking",
        "name": "Book a repair",
        "description": "The customer wants a repair or service booked.",
        "on": [{"message": ["book a repair", "appointment", "fix my bike", "book", "repair"]}],
        "clear_on_start": ["confirmed", "booking_ref"],
        "steps": [
            {
                "id": "what",
                "collect": ["service", "day"],
                "prompt": "Help the customer book a repair; ask for what is still missing.",
            },
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
                # a correction ("make it Saturday") goes back to the summary: re-confirm.
                "on_correction": "summary",
                # branch: a "no" starts the booking over with the answers cleared; a "yes"
                # leaves nothing pending, so the step is done without a speak call.
                "branches": [
                    {
                        "if": {"equals": {"confirmed": False}},
                        "then": {"step": "what", "clear": ["service", "day", "confirmed"]},
                    }
                ],
            },
            # do: idempotent on ctx.key; a failure takes on_fail.
            {
                "id": "book",
                "do": "book_repair",
                "with": {"service": "{{service}}", "day": "{{day}}", "name": "{{name}}"},
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
                "then": "paid",
                "else": "unpaid",
            },
            {"id": "paid", "say": "Payment received, thank you! See you on {{day}}.",
             "then": "end"},
            {"id": "unpaid",
             "say": "No payment yet; you can also pay when you drop the bike off.",
             "then": "end"},
            {"id": "book_failed",
             "say": "Sorry, I could not book that just now. Someone from the shop will call you.",
             "then": "end"},
        ],
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
        "on": [{"silence": SILENCE_MS}],
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

__all__ = ["BOOKINGS", "agent", "build_agent"]
