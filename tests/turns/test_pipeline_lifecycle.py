"""The pipeline and seed 002: the engine's stated turn outcome, hand-off and sources on records."""

from __future__ import annotations

from typing import Any

import pytest

from consumer import metrics
from consumer.turns.pipeline import TurnPipeline, _message_extras, turn_outcome


class Result:
    """A stand-in for ``engine.TurnResult`` with a stated turn outcome."""

    def __init__(self, stated: str | None, **fields: Any) -> None:
        self.turn_outcome = stated
        self.messages = fields.get("messages", [])
        self.outcomes = fields.get("outcomes", [])
        self.ended = fields.get("ended", [])


@pytest.mark.parametrize(
    "stated",
    ["answered", "goal_completed", "task_completed", "handoff", "fallback", "error", "gated"],
)
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
    """Only the seven outcome names reach the metric."""
    assert turn_outcome(Result("paused")) is None


def test_hand_off_and_meta_ride_only_on_the_records_that_have_them() -> None:
    """A handoff notice when present; meta.agent_id and meta.provenance on every lifecycle
    message; plain engine replies keep their keys."""
    notice = {"reason": "keyword", "summary": "s", "tag": None, "by": "rule"}
    sources = [{"type": "kb", "title": "T", "url": None, "document_id": "d"}]
    assert _message_extras({"kind": "handoff", "handoff": notice, "agent_id": "ana"}) == {
        "handoff": notice, "meta": {"agent_id": "ana", "provenance": []}}
    assert _message_extras({"kind": "ai", "provenance": sources, "agent_id": "ana"}) == {
        "meta": {"agent_id": "ana", "provenance": sources}}
    assert _message_extras({"kind": "verbatim", "text": "x"}) == {}


def test_billed_credits_are_counted_by_turn_outcome() -> None:
    """A turn's credits add to turnflow_ai_credits_total under its outcome; 0 adds nothing."""

    class Work:
        class parsed:
            kind = "message"

        timestamp_ms = None
        parts = ("one message",)

    def value(outcome: str) -> float:
        found = metrics.REGISTRY.get_sample_value(
            "turnflow_ai_credits_total", {"outcome": outcome})
        return found or 0.0

    pipeline = TurnPipeline.__new__(TurnPipeline)
    before = value("answered"), value("gated")
    pipeline._observe(Work(), {"turn_outcome": "answered", "credits": 4}, 0.0)  # type: ignore[arg-type]
    pipeline._observe(Work(), {"turn_outcome": "gated", "credits": 0}, 0.0)  # type: ignore[arg-type]
    assert value("answered") - before[0] == 4
    assert value("gated") == before[1]
