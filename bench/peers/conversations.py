"""The customer conversations every framework runs, and what a model that understood each
message would decide: the values it states and the reply the agent then gives.

Each conversation is the demo's job (book a repair, change the day, ask the opening hours,
confirm, pay) in another order or wording. A turn is one customer message with its ``kind``
(what the message does) and ``states`` (the values it gives: ``name``, ``service``, ``day``,
``confirmed``). The scripted server reads these to answer every framework's calls the same way;
nothing here depends on a framework. Standard library only: the peers' own environment imports
it too.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CONVERSATIONS", "HOURS", "Turn", "booking_ref", "final_reply", "known_after",
           "tool_for"]

HOURS = "Monday to Saturday, 9:00 to 18:00"


@dataclass(frozen=True)
class Turn:
    """One customer message and what it means."""

    text: str
    kind: str
    """greet, name, request, change, hours, confirm or pay."""
    states: dict[str, Any] = field(default_factory=dict)


def _t(text: str, kind: str, **states: Any) -> Turn:
    return Turn(text, kind, states)


CONVERSATIONS: dict[str, list[Turn]] = {
    "c01": [_t("hi, I'm Sam", "greet", name="Sam"),
            _t("I need the brakes fixed on saturday", "request", service="brakes",
               day="saturday"),
            _t("actually, make it friday", "change", day="friday"),
            _t("what are your opening hours?", "hours"),
            _t("yes, book it", "confirm", confirmed=True),
            _t("I've paid online", "pay")],
    "c02": [_t("hello", "greet"),
            _t("my name is Ada", "name", name="Ada"),
            _t("can you fix a flat tire on monday?", "request", service="flat-tire", day="monday"),
            _t("sorry, tuesday instead", "change", day="tuesday"),
            _t("yes", "confirm", confirmed=True),
            _t("done, I paid", "pay")],
    "c03": [_t("when are you open?", "hours"),
            _t("I'd like to book a tune-up", "request", service="tune-up"),
            _t("thursday", "request", day="thursday"),
            _t("actually friday works better", "change", day="friday"),
            _t("yes please", "confirm", confirmed=True),
            _t("payment sent", "pay")],
    "c04": [_t("hey, my name is Lee", "greet", name="Lee"),
            _t("my brakes are squeaking, can I book a repair?", "request", service="brakes"),
            _t("what are your opening hours?", "hours"),
            _t("wednesday", "request", day="wednesday"),
            _t("make it thursday instead", "change", day="thursday"),
            _t("yes, go ahead", "confirm", confirmed=True),
            _t("I've paid", "pay")],
    "c05": [_t("I need a flat tire fix on saturday", "request", service="flat-tire",
               day="saturday"),
            _t("wait, monday would be better", "change", day="monday"),
            _t("yes", "confirm", confirmed=True),
            _t("when are you open on monday?", "hours"),
            _t("paid now", "pay")],
    "c06": [_t("hi", "greet"),
            _t("I'm Maria", "name", name="Maria"),
            _t("book a tune-up for tuesday", "request", service="tune-up", day="tuesday"),
            _t("hmm, let's do wednesday", "change", day="wednesday"),
            _t("what are your hours?", "hours"),
            _t("yes", "confirm", confirmed=True),
            _t("I just paid", "pay")],
    "c07": [_t("good morning, this is Tom", "greet", name="Tom"),
            _t("what are your opening hours?", "hours"),
            _t("can I book brakes on monday?", "request", service="brakes", day="monday"),
            _t("actually saturday", "change", day="saturday"),
            _t("yes, confirm", "confirm", confirmed=True),
            _t("paid online just now", "pay")],
    "c08": [_t("I want to book a repair", "request"),
            _t("a tune-up", "request", service="tune-up"),
            _t("friday", "request", day="friday"),
            _t("no wait, thursday", "change", day="thursday"),
            _t("yes", "confirm", confirmed=True),
            _t("what are your opening hours?", "hours"),
            _t("I've paid", "pay")],
    "c09": [_t("hello, I'm Noor", "greet", name="Noor"),
            _t("my tire is flat, can you fix it on wednesday?", "request", service="flat-tire",
               day="wednesday"),
            _t("when are you open?", "hours"),
            _t("change it to friday please", "change", day="friday"),
            _t("yes", "confirm", confirmed=True),
            _t("payment done", "pay")],
    "c10": [_t("hi there", "greet"),
            _t("Jo", "name", name="Jo"),
            _t("brakes please", "request", service="brakes"),
            _t("tuesday", "request", day="tuesday"),
            _t("actually monday", "change", day="monday"),
            _t("what are your hours?", "hours"),
            _t("yes", "confirm", confirmed=True),
            _t("I paid", "pay")],
    "c11": [_t("can you do a tune-up on saturday? my name is Kim", "request", service="tune-up",
               day="saturday", name="Kim"),
            _t("what are your opening hours?", "hours"),
            _t("then friday instead", "change", day="friday"),
            _t("yes please", "confirm", confirmed=True),
            _t("sent the payment", "pay")],
    "c12": [_t("hello", "greet"),
            _t("my name is Ravi", "name", name="Ravi"),
            _t("what are your opening hours?", "hours"),
            _t("I need my brakes looked at on thursday", "request", service="brakes",
               day="thursday"),
            _t("actually tuesday", "change", day="tuesday"),
            _t("yes", "confirm", confirmed=True),
            _t("I've paid online", "pay")],
}


def known_after(conversation: str, turn: int) -> dict[str, Any]:
    """Every value stated up to and including ``turn`` (later statements win)."""
    known: dict[str, Any] = {}
    for said in CONVERSATIONS[conversation][: turn + 1]:
        known.update(said.states)
    return known


SERVICES = ("tune-up", "flat-tire", "brakes")
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday")


def normal(value: Any) -> str:
    """A service or day as the shop writes it: lower case, words joined by hyphens
    ("Flat tire" -> "flat-tire", "Friday" -> "friday")."""
    return re.sub(r"[\s_]+", "-", str(value or "").strip().lower())


def peer_booking(conversation: str, service: str, day: str) -> dict[str, str]:
    """What a peer's booking tool does with the model's arguments: a service or day in any case
    or spacing ("Flat tire", "Friday", "brake") is booked as the action the judge reads
    (``{"action": "book", "service", "day", "ref"}``); anything else is refused with an
    ``error`` the model reads, as the demo's own booking action refuses what it cannot book."""
    service, day = normal(service), normal(day)
    # "flat tire fix", "tune up", "brake": the service its first four letters name.
    service = next((known for known in SERVICES if service[:4] == known[:4]), service)
    if service not in SERVICES or day not in DAYS:
        return {"error": f"cannot book {service!r} on {day!r}: service is one of "
                f"{', '.join(SERVICES)}, day one of {', '.join(DAYS)}"}
    return {"action": "book", "service": service, "day": day,
            "ref": booking_ref(conversation, service, day)}


def booking_ref(conversation: str, service: str, day: str) -> str:
    """The reference the booking tool of a peer gives: a digest, so every run gives the same."""
    digest = hashlib.sha256(f"{conversation}/{service}/{day}".encode()).hexdigest()
    return "R-" + digest[:6].upper()


def tool_for(conversation: str, turn: int) -> tuple[str, dict[str, Any]] | None:
    """The tool a tool-calling agent calls for this turn, with its arguments, or None."""
    said = CONVERSATIONS[conversation][turn]
    known = known_after(conversation, turn)
    if said.kind == "hours":
        return "opening_hours", {}
    if said.kind == "confirm":
        return "book_repair", {"service": known.get("service"), "day": known.get("day"),
                               "name": known.get("name")}
    if said.kind == "pay":
        ref = booking_ref(conversation, str(known.get("service")), str(known.get("day")))
        return "check_payment", {"booking_ref": ref}
    return None


def final_reply(conversation: str, turn: int) -> str:
    """What the agent says to close the turn, once any tool has answered."""
    said = CONVERSATIONS[conversation][turn]
    known = known_after(conversation, turn)
    name, service, day = known.get("name"), known.get("service"), known.get("day")
    if said.kind == "hours":
        return f"We're open {HOURS}."
    if said.kind == "confirm":
        ref = booking_ref(conversation, str(service), str(day))
        return (f"Booked: {service} on {day}, reference {ref}. You can pay online now; "
                "I'll confirm when the payment arrives.")
    if said.kind == "pay":
        return f"Payment received, thank you! See you on {day}."
    if said.kind == "change":
        return f"Sure, {day} then: {service} on {day}. Shall I book it?"
    if said.kind == "greet" and not name:
        return "Hi! I'm Ana from Spoke & Chain bike repair. May I have your first name?"
    if service is None:
        greeting = f"Nice to meet you, {name}. " if said.kind in ("greet", "name") else ""
        return greeting + "Which service does the bike need: a tune-up, a flat-tire fix or brakes?"
    if day is None:
        return "Which day suits you, Monday to Saturday?"
    return f"So: {service} on {day}. Shall I book it?"
