"""The offline provider reads a burst message by message, as a model reads several messages
sent in a row: values from the latest message that gives one, a name that never runs into the
next line, a hello answered, and a short answer taken for the field the last reply asked."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.providers import RuleProvider
from engine.providers.base import ChatMessage, ModelRequest
from engine.providers.rules import latest, message_parts, read_yes_no
from tests.engine.providers.test_rules import FIELDS, field_schema, obj, valid


def _understand(parts: list[str], fields: list[str], *, asked: str | None = None,
                branches: bool = False) -> ModelRequest:
    specs = {n: FIELDS[n] for n in fields}
    sections: dict[str, Any] = {"fields": obj({n: field_schema(s) for n, s in specs.items()})}
    if branches:
        sections["branches"] = obj({"q1": {"type": ["boolean", "null"]}})
    history = [ChatMessage(role="assistant", text=asked)] if asked else []
    return ModelRequest(
        schema_name="understand", system="", json_schema=obj(sections),
        messages=[*history, *(ChatMessage(role="user", text=p) for p in parts)],
        meta={"fields": specs, "branches": {"q1": "Is that all?"} if branches else {},
              "message": "\n".join(parts), "messages": parts},
    )


def _speak(parts: list[str], pending: list[str], *, known: dict[str, Any] | None = None,
           already_sent: list[str] | None = None) -> ModelRequest:
    specs = {n: FIELDS[n] for n in pending}
    return ModelRequest(
        schema_name="speak", system="",
        messages=[ChatMessage(role="user", text=p) for p in parts],
        json_schema=obj({"message": {"type": ["string", "null"]},
                         **{n: field_schema(s) for n, s in specs.items()}}),
        meta={"prompt": None, "pending": specs, "known": known or {},
              "message": "\n".join(parts), "messages": parts, "agent_name": "Ana",
              "already_sent": already_sent or [], "retry": False},
    )


def test_message_parts_and_latest() -> None:
    assert message_parts({"messages": ["a", "b"], "message": "a\nb"}) == ["a", "b"]
    assert message_parts({"message": "one"}) == ["one"]
    assert message_parts({"messages": [1, 2], "message": "x"}) == ["x"]
    assert message_parts({}) == []
    assert latest(["yes", "no wait"], read_yes_no) is False
    assert latest(["hmm", "ok"], read_yes_no) is True
    assert latest([], read_yes_no) is None


async def test_the_latest_message_of_a_burst_wins() -> None:
    provider = RuleProvider()
    reply = provider.understand(_understand(["brakes please", "no, a tune-up"], ["service"],
                                            branches=True))
    assert reply.json is not None
    assert reply.json["fields"]["service"] == "tune-up"
    assert reply.json["branches"]["q1"] is False


async def test_a_name_never_runs_into_the_next_message() -> None:
    provider = RuleProvider()
    request = _understand(["hi", "my name is Lee", "I need a flat tire fix"], ["name"])
    reply = provider.understand(request)
    assert reply.json is not None and reply.json["fields"]["name"] == "Lee"
    assert valid(request, reply.json)
    # The same words in one message on several lines: still only the name.
    joined = provider.understand(_understand(["my name is Lee\nI need a fix"], ["name"]))
    assert joined.json is not None and joined.json["fields"]["name"] == "Lee"


async def test_a_short_reply_answers_the_field_just_asked() -> None:
    """The last reply asked for the name: "Sam" alone is the name; a day is not a name; and
    without that question nothing is guessed."""
    provider = RuleProvider()
    asked = "Could you tell me your first name?"
    named = provider.understand(_understand(["Sam"], ["name"], asked=asked))
    assert named.json is not None and named.json["fields"]["name"] == "Sam"
    not_a_name = provider.understand(_understand(["saturday would be best"], ["name"],
                                                 asked=asked))
    assert not_a_name.json is not None and not_a_name.json["fields"]["name"] is None
    unasked = provider.understand(_understand(["Sam"], ["name"]))
    assert unasked.json is not None and unasked.json["fields"]["name"] is None


async def test_speak_greets_a_burst_and_says_the_choice_it_heard() -> None:
    provider = RuleProvider()
    reply = provider.speak(_speak(["hi", "brakes please"], ["service", "email"],
                                  known={"name": "Lee"}))
    assert reply.text == "Hi Lee! Noted: brakes. Could you tell me your e-mail?"
    assert reply.json is not None and reply.json["service"] == "brakes"
    # Something was already said this turn (a greeting step): no second hello.
    quiet = provider.speak(_speak(["hi", "brakes please"], ["service", "email"],
                                  already_sent=["Hi! I'm Ana."]))
    assert quiet.text == "Noted: brakes. Could you tell me your e-mail?"
    # A single "hi" is left to the agent's own greeting.
    single = provider.speak(_speak(["hi"], ["email"]))
    assert single.text == "Could you tell me your e-mail?"


@settings(max_examples=60, deadline=None)
@given(parts=st.lists(st.text(max_size=60), max_size=5))
def test_any_burst_gets_an_envelope_that_fits(parts: list[str]) -> None:
    """Whatever the messages hold, both calls answer inside their envelope and never raise."""
    provider = RuleProvider()
    understood = _understand(parts, ["name", "service", "day", "people"], branches=True,
                             asked="Could you tell me your first name?")
    assert valid(understood, provider.understand(understood).json)
    spoken = _speak(parts, ["name", "service", "people"])
    reply = provider.speak(spoken)
    assert isinstance(reply.text, str) and reply.text
    assert valid(spoken, reply.json)
