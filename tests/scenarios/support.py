"""Shared builders for the code-only scenarios: an agent whose provider fails if called."""

from __future__ import annotations

from typing import Any

from engine import Agent, FakeClock, MockProvider, TurnResult

START = "2026-01-05T09:00:00Z"  # a Monday


def code_only_agent(
    flows: list[dict[str, Any]], *, clock: FakeClock | None = None, **kwargs: Any
) -> tuple[Agent, MockProvider, FakeClock]:
    """An agent with an empty mock script: any model call raises ``MockExhausted``."""
    provider = MockProvider([])
    clock = clock or FakeClock(START)
    kwargs.setdefault("fields", {"nome": {"type": "string"}, "idade": {"type": "integer"}})
    agent = Agent(name="Ana", provider=provider, clock=clock, flows=flows, **kwargs)
    return agent, provider, clock


def codes(result: TurnResult) -> list[str]:
    """The outcome codes of a result, in order."""
    return [o.code for o in result.outcomes]


def texts(result: TurnResult) -> list[str]:
    """The texts of a result's messages, in emission order."""
    return [m.text for m in result.messages]


def session_with(data: dict[str, Any]) -> dict[str, Any]:
    """A stored session ``s1`` (no runs, claims or inputs) that already knows ``data``."""
    return {
        "id": "s1",
        "v": 4,
        "version": 0,
        "data": data,
        "runs": [],
        "claims": {},
        "inputs": [],
        "metadata": {},
    }


def saved(result: TurnResult) -> dict[str, Any]:
    """The session as the host stores it (JSON)."""
    return result.session.model_dump(mode="json")
