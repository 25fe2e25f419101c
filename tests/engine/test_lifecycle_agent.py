"""Agent(lifecycle=...): validated at construction, immutable, and opt-in."""

from __future__ import annotations

import pytest

from engine import (
    Agent,
    FlowConfigurationError,
    InMemoryKnowledgeIndex,
    Lifecycle,
    MockProvider,
)


def test_bad_lifecycle_settings_fail_when_the_agent_is_built() -> None:
    """A budget out of range is a FlowConfigurationError naming the setting."""
    with pytest.raises(FlowConfigurationError, match="max_tool_calls"):
        Agent(name="Ana", lifecycle={"max_tool_calls": 7})
    with pytest.raises(FlowConfigurationError, match="turn_timeout_ms"):
        Agent(name="Ana", lifecycle={"turn_timeout_ms": 1_000})


def test_knowledge_gets_an_in_memory_index() -> None:
    """Documents without an index of their own are searched in memory."""
    agent = Agent(name="Ana", lifecycle={"knowledge": [{"id": "a", "title": "A", "text": "x"}]})
    assert agent.config.lifecycle is not None
    assert isinstance(agent.config.lifecycle.knowledge_index, InMemoryKnowledgeIndex)
    assert Agent(name="Ana").config.lifecycle is None


def test_a_settings_object_is_accepted_as_is() -> None:
    """An engine.Lifecycle passes through unchanged."""
    settings = Lifecycle(max_tool_calls=2)
    agent = Agent(name="Ana", lifecycle=settings)
    assert agent.config.lifecycle == settings


def test_with_knowledge_index_returns_a_new_agent() -> None:
    """The original agent keeps its index; the copy uses the given one."""

    class Index:
        async def search(self, query: str, *, sources: object, limit: int) -> list[object]:
            return []

    agent = Agent(name="Ana", provider=MockProvider([]),
                  lifecycle={"knowledge": [{"id": "a", "title": "A", "text": "x"}]})
    index = Index()
    other = agent.with_knowledge_index(index)
    assert other.config.lifecycle is not None and agent.config.lifecycle is not None
    assert other.config.lifecycle.knowledge_index is index
    assert isinstance(agent.config.lifecycle.knowledge_index, InMemoryKnowledgeIndex)
    assert other.config.provider is agent.config.provider and other.name == "Ana"
    with pytest.raises(AttributeError):
        other.x = 1  # type: ignore[attr-defined]  # agents are immutable
    with pytest.raises(ValueError):
        Agent(name="Ana").with_knowledge_index(index)
