"""The pipeline and seed 002: the engine's stated turn outcome, hand-off and sources on records."""

from __future__ import annotations

from typing import Any

import pytest

from consumer.pipeline import _message_extras, turn_outcome


class Result:
    """A stand-in for ``engine.TurnResult`` with a stated turn outcome."""

    def __init__(self, stated: str | None, **fields: Any) -> None:
        self.turn_outcome = stated
        self.messages = fields.get("messages", [])
        self.outcomes = fields.get("outcomes", [])
        self.ended = fields.get("ended", [])


@pytest.mark.parametrize("stated", ["answered", "task_completed", "handoff", "fallback", "error"])
def test_a_stated_turn_outcome_is_the_label(stated: str) -> None:
    """The engine's own turn outcome wins over anything the outcome lines suggest."""
    lines = [{"code": "handed-back"}, {"code": "action-failed"}]
    assert turn_outcome(Result(stated, outcomes=lines)) == stated


def test_no_stated_outcome_falls_back_to_the_outcome_lines() -> None:
    """Agents without lifecycle settings state none: the lines decide, and the hand-back of a
    cleared hand-off (a silent turn) is no hand-off."""
    assert turn_outcome(Result(None, outcomes=[{"code": "handed-back"}])) is None
    assert turn_outcome(Result(None, outcomes=[{"code": "handed-off"}])) is None
    assert turn_outcome({"turn_outcome": None, "messages": [{}]}) == "answered"


def test_an_unknown_stated_outcome_is_not_a_label() -> None:
    """Only the five outcome names reach the metric."""
    assert turn_outcome(Result("gated")) is None


def test_hand_off_and_sources_ride_only_on_the_records_that_have_them() -> None:
    """A handoff notice and provenance are added when present; plain replies keep their keys."""
    notice = {"reason": "keyword", "summary": "s", "tag": None, "by": "rule"}
    sources = [{"type": "kb", "title": "T", "url": None, "document_id": "d"}]
    assert _message_extras({"kind": "handoff", "handoff": notice, "provenance": []}) == {
        "handoff": notice}
    assert _message_extras({"kind": "ai", "handoff": None, "provenance": sources}) == {
        "provenance": sources}
    assert _message_extras({"kind": "verbatim", "text": "x"}) == {}
