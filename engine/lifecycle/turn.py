"""``LifecycleTurn``: what the lifecycle features know during one turn, and how it ends.

It is created on first use (``of(state)``) only for an agent with ``lifecycle`` settings, reads
the session's ``LifecycleMemory`` once, and at the end of the turn (``close``) writes the memory
back, counts fallbacks, and gives ``TurnResult`` its lifecycle fields. An agent without
settings never creates one, so its turns are exactly the engine's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.lifecycle.credits import Usage, breakdown, credits_for
from engine.lifecycle.knowledge import InMemoryKnowledgeIndex, KnowledgeHit
from engine.lifecycle.language import LanguageChoice
from engine.lifecycle.results import (
    GoalResult,
    HandoffNotice,
    LinkFixReport,
    Source,
    TaskResult,
    TurnOutcome,
)
from engine.lifecycle.settings import Lifecycle, LifecycleMemory
from engine.lifecycle.web_search import WebResult, distinct_pages
from engine.request import Outcome

if TYPE_CHECKING:
    from engine.state import TurnState

MAX_PROVENANCE = 8


@dataclass
class LifecycleTurn:
    """The lifecycle's working memory for one turn."""

    settings: Lifecycle
    memory: LifecycleMemory
    read: dict[str, Any]
    tool_calls: int = 0
    found: list[KnowledgeHit] = field(default_factory=list)
    handoff: HandoffNotice | None = None
    handoff_requested: HandoffNotice | None = None
    partial_text: str | None = None
    task: TaskResult | None = None
    link_fixes: list[LinkFixReport] = field(default_factory=list)
    fallback: bool = False
    language: LanguageChoice | None = None
    usage: Usage = field(default_factory=Usage)  # what costs credits, counted as it happens
    skills: list[str] = field(default_factory=list)  # skills loaded this turn, in order
    classifier_calls: int = 0
    classified_language: str | None = None  # the skill classifier's reading of the message
    goal: GoalResult | None = None  # the goal complete_goal finished this turn
    prepared: bool = False  # skills chosen for this turn's speak call
    web_found: list[WebResult] = field(default_factory=list)  # web results this turn
    image_reading: str | None = None  # what the vision call read in this message's images
    image_notes: list[str] = field(default_factory=list)  # images refused, for the reply
    gated: bool = False  # the host's plan check said the plan does not include the agent

    def sources(self) -> list[Source]:
        """The documents this turn's knowledge searches returned, then the web pages its web
        searches returned, once each, at most eight."""
        out: list[Source] = []
        seen: set[str] = set()
        for hit in self.found:
            if hit.document_id in seen:
                continue
            seen.add(hit.document_id)
            out.append(Source(type=hit.type, title=hit.title, url=hit.url,
                              document_id=hit.document_id))
        for page in distinct_pages(self.web_found):
            out.append(Source(type="web", title=page.title, url=page.url))
        return out[:MAX_PROVENANCE]


def prepare(value: Lifecycle | dict[str, Any] | None) -> Lifecycle | None:
    """Validate the settings and give them an in-memory knowledge index when none is set."""
    if value is None:
        return None
    settings = value if isinstance(value, Lifecycle) else Lifecycle.model_validate(value)
    if settings.knowledge_index is None and settings.knowledge:
        settings = settings.model_copy(
            update={"knowledge_index": InMemoryKnowledgeIndex(settings.knowledge)}
        )
    return settings


def of(state: TurnState) -> LifecycleTurn | None:
    """This turn's lifecycle memory, or None for an agent without lifecycle settings."""
    settings = state.config.lifecycle
    if settings is None:
        return None
    if state.lifecycle is None:
        memory = LifecycleMemory.read(state.session.metadata)
        read = memory.model_dump(mode="json")
        start = state.request.start
        if start is not None and start.skills:  # flow_only skills stay with the conversation
            named = [s.name for s in settings.skills if s.name in start.skills]
            memory.flow_skills = list(dict.fromkeys([*memory.flow_skills, *named]))
        state.lifecycle = LifecycleTurn(settings, memory, read)
    turn: LifecycleTurn = state.lifecycle
    return turn


def outcome(state: TurnState, turn: LifecycleTurn) -> TurnOutcome | None:
    """The turn-level outcome: gated, hand-off, task, fallback, error, answered, or None
    (silent)."""
    if turn.gated:
        return "gated"
    if turn.handoff is not None:
        return "handoff"
    if turn.task is not None:
        return "task_completed"
    if turn.goal is not None:
        return "goal_completed"
    if turn.fallback:
        return "fallback"
    reply = state.reply
    if reply is not None and reply.text is None and reply.deferred is not None:
        return "error"
    if any(m.kind in ("ai", "verbatim") for m in state.messages):
        return "answered"
    if any(o.code in ("action-failed", "deferred") for o in state.outcomes):
        return "error"
    return None


def close(state: TurnState) -> dict[str, Any]:
    """End the turn's lifecycle: memory saved, provenance attached; the result's fields."""
    turn = state.lifecycle if state.config.lifecycle is not None else None
    if state.ignored or turn is None:
        return {}  # the engine's own result, unchanged, for agents without lifecycle settings
    result = outcome(state, turn)
    if result == "fallback":
        turn.memory.consecutive_fallbacks += 1
    elif result in ("answered", "task_completed"):
        turn.memory.consecutive_fallbacks = 0
    if turn.memory.model_dump(mode="json") != turn.read:
        turn.memory.write(state.session.metadata)
    credits = credits_for(result, turn.usage)
    if result is not None:
        # The turn log keeps outcome lines: the bill goes there as one more, ``billed``.
        state.outcomes.append(
            Outcome(code="billed", detail=breakdown(result, turn.usage), credits=credits)
        )
    sources = turn.sources()
    agent_id = turn.settings.agent_id or state.config.name
    for message in state.messages:
        message.agent_id = agent_id  # meta.agent_id on every message of the agent
        if sources and message.kind == "ai":
            message.provenance = list(sources)
    return {
        "turn_outcome": result,
        "link_fixes": list(turn.link_fixes),
        "task_result": turn.task,
        "goal_result": turn.goal,
        "credits": credits,
    }
