"""Hand-off rules: keywords, max_turns and max_consecutive_fallbacks, judged by code."""

from __future__ import annotations

import pytest

from engine.lifecycle.handoff_rules import keyword_in, rule_fired
from engine.lifecycle.settings import HandoffRules, LifecycleMemory


@pytest.mark.parametrize(
    ("message", "found"),
    [
        ("Quero falar com um ATENDENTE agora", "atendente"),
        ("me passa pra um humano", "humano"),
        ("talk to a real person please", "real person"),
        ("Atendênte!", "atendente"),
        ("a humanidade é linda", None),
        ("realperson", None),
    ],
)
def test_keywords_match_whole_words_ignoring_case_and_accents(
    message: str, found: str | None
) -> None:
    """A keyword fires on whole words or phrases only, whatever the case or accents."""
    assert keyword_in(message, ["atendente", "humano", "real person"]) == found


def test_a_keyword_hands_off_with_its_reason_and_tag() -> None:
    """The keyword rule names the keyword in the summary and carries the rules' tag."""
    rules = HandoffRules(keywords=["gerente"], tag="escalation")
    notice = rule_fired(rules, "chama o gerente", LifecycleMemory())
    assert notice is not None
    assert (notice.reason, notice.tag, notice.by) == ("keyword", "escalation", "rule")
    assert "gerente" in notice.summary


def test_max_turns_fires_once_the_agent_answered_that_many() -> None:
    """With max_turns 3, the 3rd message is answered and the 4th is handed over."""
    rules = HandoffRules(max_turns=3)
    assert rule_fired(rules, "oi", LifecycleMemory(turns=2)) is None
    notice = rule_fired(rules, "oi", LifecycleMemory(turns=3))
    assert notice is not None and notice.reason == "max_turns"


def test_max_consecutive_fallbacks_fires_at_its_count() -> None:
    """With a limit of 2, one fallback in a row is tolerated and two hand over."""
    rules = HandoffRules(max_consecutive_fallbacks=2)
    assert rule_fired(rules, "oi", LifecycleMemory(consecutive_fallbacks=1)) is None
    notice = rule_fired(rules, "oi", LifecycleMemory(consecutive_fallbacks=2))
    assert notice is not None and notice.reason == "max_consecutive_fallbacks"


def test_rules_are_checked_keyword_then_turns_then_fallbacks() -> None:
    """When several rules fire, the keyword wins, then max_turns."""
    rules = HandoffRules(keywords=["humano"], max_turns=1, max_consecutive_fallbacks=1)
    memory = LifecycleMemory(turns=5, consecutive_fallbacks=5)
    first = rule_fired(rules, "humano", memory)
    second = rule_fired(rules, "oi", memory)
    assert first is not None and first.reason == "keyword"
    assert second is not None and second.reason == "max_turns"


def test_no_rule_set_never_fires() -> None:
    """Empty rules hand nothing over, however long the conversation."""
    assert rule_fired(HandoffRules(), "humano", LifecycleMemory(turns=999)) is None


@pytest.mark.parametrize("field", ["max_turns", "max_consecutive_fallbacks"])
def test_limits_below_one_are_configuration_errors(field: str) -> None:
    """A limit of 0 is refused when the settings are built."""
    with pytest.raises(ValueError):
        HandoffRules(**{field: 0})
