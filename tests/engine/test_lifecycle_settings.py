"""Lifecycle settings: defaults, ranges at and past their edges, and the session memory."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from engine.lifecycle.settings import HandoffRules, KnowledgeDocument, Lifecycle, LifecycleMemory


def test_defaults_turn_every_feature_off_and_set_the_seed_budgets() -> None:
    """No tool, rule, language, link check or footer unless asked; 4 tool calls, 8 seconds."""
    settings = Lifecycle()
    assert settings.tools.enabled() == []
    assert settings.handoff is None and settings.language is None
    assert settings.link_check is False and settings.sources_footer is None
    assert settings.max_tool_calls == 4 and settings.turn_timeout_ms == 8_000
    assert settings.turn_timeout_s == 8.0
    assert settings.timer is asyncio.timeout


@pytest.mark.parametrize("value", [1, 6])
def test_max_tool_calls_accepts_one_to_six(value: int) -> None:
    """1 and 6 are the edges of max_tool_calls."""
    assert Lifecycle(max_tool_calls=value).max_tool_calls == value


@pytest.mark.parametrize("value", [0, 7])
def test_max_tool_calls_outside_one_to_six_is_refused(value: int) -> None:
    """0 and 7 are refused."""
    with pytest.raises(ValidationError):
        Lifecycle(max_tool_calls=value)


@pytest.mark.parametrize("value", [2_000, 15_000])
def test_turn_timeout_accepts_two_to_fifteen_seconds(value: int) -> None:
    """2 s and 15 s are the edges of turn_timeout_ms."""
    assert Lifecycle(turn_timeout_ms=value).turn_timeout_ms == value


@pytest.mark.parametrize("value", [1_999, 15_001])
def test_turn_timeout_outside_two_to_fifteen_seconds_is_refused(value: int) -> None:
    """One millisecond under 2 s or over 15 s is refused."""
    with pytest.raises(ValidationError):
        Lifecycle(turn_timeout_ms=value)


def test_enabled_tools_are_listed_in_a_fixed_order() -> None:
    """enabled() names the switched-on built-ins."""
    settings = Lifecycle.model_validate({"tools": {"set_state": True, "handoff": True},
                                        "escalation": True})
    assert settings.tools.enabled() == ["handoff", "set_state"]


def test_duplicate_knowledge_ids_are_refused() -> None:
    """Two documents with one id are a configuration error."""
    docs = [KnowledgeDocument(id="a", title="A", text="x")] * 2
    with pytest.raises(ValidationError):
        Lifecycle(knowledge=docs)


def test_the_rules_tag_must_be_one_of_the_tags() -> None:
    """A rule tag outside a non-empty tag list is refused."""
    with pytest.raises(ValidationError):
        Lifecycle(handoff=HandoffRules(tag="vip", tags=["billing"]))
    assert Lifecycle(handoff=HandoffRules(tag="vip", tags=["vip"])).handoff_rules.tag == "vip"


def test_memory_round_trips_through_session_metadata() -> None:
    """What a turn writes under metadata['lifecycle'] reads back equal; absent means empty."""
    metadata: dict[str, object] = {"other": 1}
    assert LifecycleMemory.read(metadata) == LifecycleMemory()
    memory = LifecycleMemory(turns=3, consecutive_fallbacks=1, state={"k": "v"}, language="pt")
    memory.write(metadata)
    assert LifecycleMemory.read(metadata) == memory and metadata["other"] == 1
