"""Agents the replay command-line tests name as ``tests.replay.agents:<name>``."""

from __future__ import annotations

from typing import Any

from engine import Agent
from tests.replay.support import demo, step


def same() -> Agent:
    """The demo agent as recorded."""
    return demo()


def reworded() -> Agent:
    """The demo agent with another greeting."""

    def change(flows: list[dict[str, Any]]) -> None:
        step(flows, "welcome", "hello")["say"] = "Hello! Ana here, at Spoke & Chain."

    return demo(change)


def not_an_agent() -> object:
    """Something with a turn method that is not an engine agent."""

    class Double:
        async def turn(self, request: dict[str, Any]) -> dict[str, Any]:
            return {}

    return Double()


def misrouting() -> Agent:
    """The demo agent on a model that routes and hears some answers differently."""
    from tests.replay.support import Misrouting

    return demo(provider=Misrouting())


def reworded_without_brake_note() -> Agent:
    """docs/replay.md's two edits at once: another greeting (turn 1), and brake jobs skip
    their note (turn 3 of a brakes booking)."""

    def change(flows: list[dict[str, Any]]) -> None:
        step(flows, "welcome", "hello")["say"] = "Hello! Ana here, at Spoke & Chain."
        step(flows, "booking", "brakes?")["then"] = {"step": "summary", "clear": ["confirmed"]}

    return demo(change)
