"""What the lifecycle adds to a turn's result: hand-off notices, sources, link fixes, tasks.

These are plain carriers (pydantic, JSON-ready) so ``request.py`` can put them on ``Message``
and ``TurnResult`` without importing the modules that produce them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TurnOutcome = Literal[
    "answered", "goal_completed", "task_completed", "handoff", "fallback", "error", "gated"
]


def absent(value: Any) -> bool:
    """True for an unset lifecycle field: it is left out of dumps, so an agent without lifecycle
    settings produces the same JSON results as before."""
    return value is None or value == []


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HandoffNotice(_Model):
    """Why and how the conversation was handed to a human.

    ``reason``: a rule's (``keyword``, ``max_turns``, ``max_consecutive_fallbacks``) or the
    ``handoff`` tool's (``user_requested``, ``cannot_help``, ``out_of_scope``, ``sensitive``,
    ``other``). ``by`` says which of the two decided.
    """

    reason: str
    summary: str = ""
    tag: str | None = None
    by: Literal["rule", "tool"] = "rule"


class Source(_Model):
    """One source a reply used: ``{type, title, url?, document_id?}``."""

    type: Literal["kb", "faq", "web"]
    title: str
    url: str | None = None
    document_id: str | None = None


class LinkFixReport(_Model):
    """One change the link check made to a reply."""

    action: Literal["repaired", "removed"]
    url: str
    replacement: str | None = None
    message_key: str | None = None


class TaskResult(_Model):
    """The outputs ``complete_task`` returned to the host, and the run that finished them."""

    outputs: dict[str, Any] = Field(default_factory=dict)
    run_id: str | None = None
    flow_id: str | None = None


class GoalResult(_Model):
    """A skill goal ``complete_goal`` finished: the skill and the answers gathered."""

    skill: str
    outputs: dict[str, Any] = Field(default_factory=dict)
