"""The opt-in lifecycle settings of an agent: hand-off, built-in tools, limits, language, links.

``Agent(lifecycle=...)`` takes a ``Lifecycle`` (or the equivalent dict). An agent without it
behaves exactly as the engine of seeds 000/001. With it, code still decides everything: the
hand-off rules run before any model call, every built-in tool checks its own limits, the
speak call is bounded by ``max_tool_calls`` and ``turn_timeout_ms``, and the reply's links are
checked before it leaves. The model only reads and phrases.

Per-session lifecycle facts (turn count, consecutive fallbacks, the hand-off in force, the
``set_state`` memory, the last detected language) live in ``session.metadata["lifecycle"]``
(see ``LifecycleMemory``), so they travel with the session the host already saves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    field_validator,
    model_validator,
)

from engine.config import FieldSpec

HANDOFF_CLEARED_EVENT = "handoff_cleared"
HANDOFF_REASONS = ("user_requested", "cannot_help", "out_of_scope", "sensitive", "other")
RULE_REASONS = ("keyword", "max_turns", "max_consecutive_fallbacks")
TURN_OUTCOMES = (
    "answered", "goal_completed", "task_completed", "handoff", "fallback", "error", "gated"
)
PLAN_GATED = "plan_gated"

MAX_TOOL_CALLS_DEFAULT = 4
MAX_TOOL_CALLS_RANGE = (1, 6)
TURN_TIMEOUT_MS_DEFAULT = 8_000
TURN_TIMEOUT_MS_RANGE = (2_000, 15_000)

SpeakTimer = Callable[[float], AbstractAsyncContextManager[Any]]
# The host's plan check: given the session, whether its plan includes the agent (sync or async).
PlanCheck = Callable[[Any], bool | Awaitable[bool]]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)


class HandoffRules(_Model):
    """When code hands the conversation to a human, before any model call.

    ``keywords`` match whole words, case- and accent-insensitively; ``max_turns`` is the number
    of customer messages the agent answers (the next one is handed over);
    ``max_consecutive_fallbacks`` is how many fallback turns in a row are tolerated (the next
    message is handed over). ``tag`` goes on rule hand-offs; ``tags`` are the ones the
    ``handoff`` tool may choose from. ``message`` is sent to the customer with the hand-off
    (empty: nothing for the customer, the host's notice only).
    """

    keywords: list[str] = Field(default_factory=list)
    max_turns: int | None = Field(default=None, ge=1)
    max_consecutive_fallbacks: int | None = Field(default=None, ge=1)
    tag: str | None = None
    tags: list[str] = Field(default_factory=list)
    message: str = ""
    clear_event: str = HANDOFF_CLEARED_EVENT


class BuiltinTools(_Model):
    """Which built-in tools the speak call is offered; each is off unless enabled.

    ``load_skill`` and the goal tools are not listed: they are offered whenever there is a
    skill to load or a goal to pursue."""

    handoff: bool = False
    set_state: bool = False
    search_knowledge: bool = False
    complete_task: bool = False
    web_search: bool = False

    def enabled(self) -> list[str]:
        return [name for name, on in self.model_dump().items() if on]


class LanguageSettings(_Model):
    """Which language the reply is in: ``fixed`` -> ``base_language``, else
    ``response_language`` when set, else the customer's latest message (detected)."""

    strategy: Literal["cascade", "fixed"] = "cascade"
    base_language: str = "en"
    response_language: str | None = None
    detect_among: list[str] = Field(default_factory=list)


class KnowledgeDocument(_Model):
    """One document of the agent's knowledge: an FAQ entry or a knowledge-base page.

    ``source`` names the collection it belongs to (a search reads at most 8 sources).
    """

    id: str = Field(min_length=1)
    title: str
    text: str
    type: Literal["faq", "kb"] = "kb"
    source: str = "knowledge"
    url: str | None = None


SKILL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
MAX_SKILL_CHARS = 60_000


class GoalSettings(_Model):
    """A skill's goal: the answers the agent gathers while the skill is loaded, each fitted to
    its field like a flow's fields (type, enum)."""

    description: str = ""
    fields: dict[str, FieldSpec] = Field(min_length=1)


class Skill(_Model):
    """A named text the agent reads when the skill is loaded (see ``skills``).

    ``mode``: ``always_on`` (every turn), ``flow_only`` (when the host's start names it),
    ``model_selected`` (picked by the classifier or loaded by the model with ``load_skill``).
    ``tool_allowlist``: the tools the agent may use while it is loaded (None: all).
    """

    name: str = Field(pattern=SKILL_NAME)
    description: str = ""
    text: str = Field(max_length=MAX_SKILL_CHARS)
    mode: Literal["always_on", "flow_only", "model_selected"] = "model_selected"
    tool_allowlist: list[str] | None = None
    goal: GoalSettings | None = None


IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


class ImageSettings(_Model):
    """Image understanding: whether images the customer sends are read, and the limits."""

    understanding: bool = False
    max_images: int = Field(default=4, ge=1, le=10)
    max_bytes: int = Field(default=5_000_000, ge=1, le=20_000_000)  # per inline image
    media_types: list[str] = Field(default_factory=lambda: list(IMAGE_MEDIA_TYPES))


WEB_SEARCHES_PER_CONVERSATION = 3


class WebSearchSource(_Model):
    """The agent's web search source: where ``web_search`` looks and how often it may.

    ``backend`` is any object with ``async search(query, *, limit, allowed_domains)`` (see
    ``web_search``: ``OfflineWebSearch``, ``BraveWebSearch``)."""

    enabled: bool = True
    allowed_domains: list[str] = Field(default_factory=list)
    max_per_conversation: int = Field(default=WEB_SEARCHES_PER_CONVERSATION, ge=1)
    backend: Any

    @field_validator("backend")
    @classmethod
    def _searches(cls, value: Any) -> Any:
        if not callable(getattr(value, "search", None)):
            raise ValueError("web_search.backend needs an async search(query, *, limit, "
                             "allowed_domains) method")
        return value


def workspace_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a workspace index (None when it can, or is None)."""
    if value is None:
        return None
    missing = [name for name in ("sources", "search") if not callable(getattr(value, name, None))]
    if not missing:
        return None
    return (f"workspace_knowledge needs sources() and async search(query, *, sources, limit) "
            f"methods; {type(value).__name__} has no {' or '.join(missing)}()")


def _refuse_repeats(names: list[str], what: str) -> None:
    """Raise naming the first of ``names`` that appears twice."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"duplicate {what} {name!r}")
        seen.add(name)


class LifecycleData(_Model):
    """The lifecycle settings that are data, declared once: ``Lifecycle`` adds the host's
    objects (indexes, the plan check, the timer, a web search backend) and the agent document's
    ``engine.definition.LifecycleDefinition`` adds the names of pack backends, so the engine's
    settings and the document's schema cannot drift apart. Every feature is off unless set."""

    handoff: HandoffRules | None = None
    # Whether the agent may hand a conversation to a human: the ``handoff`` tool is offered only
    # with it (and ``tools.handoff``), and a plan-gated turn is handed over only with it.
    # Hand-off settings and the tool do not switch it on; the hand-off rules fire either way.
    escalation: StrictBool = False
    tools: BuiltinTools = Field(default_factory=BuiltinTools)
    max_tool_calls: int = Field(
        default=MAX_TOOL_CALLS_DEFAULT, ge=MAX_TOOL_CALLS_RANGE[0], le=MAX_TOOL_CALLS_RANGE[1]
    )
    turn_timeout_ms: int = Field(
        default=TURN_TIMEOUT_MS_DEFAULT, ge=TURN_TIMEOUT_MS_RANGE[0], le=TURN_TIMEOUT_MS_RANGE[1]
    )
    fallback_message: str | None = None
    language: LanguageSettings | None = None
    link_check: bool = False
    link_domains: list[str] = Field(default_factory=list)
    sources_footer: Literal["urls_only", "urls_and_kb"] | None = None
    source_link_params: dict[str, str] = Field(default_factory=dict)
    knowledge: list[KnowledgeDocument] = Field(default_factory=list)
    skills: list[Skill] = Field(default_factory=list)
    images: ImageSettings | None = None
    # The skill classifier's own budget; it runs before the turn's and never counts toward it.
    classifier_timeout_ms: int = Field(default=1_500, ge=100, le=5_000)


class Lifecycle(LifecycleData):
    """The lifecycle settings (``LifecycleData``) with the host's objects; every feature is off
    unless set."""

    # A ``KnowledgeIndex`` (see ``knowledge``); None builds the in-memory index over ``knowledge``.
    knowledge_index: Any = None
    # The workspace's whole Knowledge Base, a ``WorkspaceKnowledgeIndex`` (see ``knowledge``):
    # what ``search_knowledge`` searches when the agent has no documents of its own. The host
    # passes it (here, or with ``Agent.with_workspace_knowledge``); None: nothing to search.
    workspace_knowledge: Any = None
    web_search: WebSearchSource | None = None
    # The host's plan check (see ``plan``): None means every turn is included.
    plan_check: PlanCheck | None = None
    # ``meta.agent_id`` on every message of the agent; None uses the agent's name.
    agent_id: str | None = None
    # How the speak call's time budget is enforced: ``timer(seconds)`` is an async context
    # manager that raises ``TimeoutError`` when the time is up. The default is
    # ``asyncio.timeout`` (the event loop's monotonic clock, never the wall clock); tests
    # inject one that expires at once.
    timer: SpeakTimer = asyncio.timeout

    @field_validator("knowledge")
    @classmethod
    def _unique_ids(cls, value: list[KnowledgeDocument]) -> list[KnowledgeDocument]:
        _refuse_repeats([doc.id for doc in value], "knowledge document id")
        return value

    @field_validator("workspace_knowledge")
    @classmethod
    def _lists_and_searches(cls, value: Any) -> Any:
        problem = workspace_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("skills")
    @classmethod
    def _unique_skills(cls, value: list[Skill]) -> list[Skill]:
        _refuse_repeats([skill.name for skill in value], "skill name")
        return value

    @model_validator(mode="after")
    def _tag_known(self) -> Lifecycle:
        rules = self.handoff
        if rules is not None and rules.tag and rules.tags and rules.tag not in rules.tags:
            raise ValueError(f"handoff tag {rules.tag!r} is not one of handoff.tags")
        return self

    @model_validator(mode="after")
    def _escalation_said(self) -> Lifecycle:
        """``tools.handoff`` on with ``escalation`` left unset would never offer the tool, without
        a word: refuse it and say what to set. ``escalation: false`` given is a choice."""
        if self.tools.handoff and "escalation" not in self.model_fields_set:
            raise ValueError(
                "tools.handoff is on but escalation is not set: the handoff tool is offered "
                "only with escalation on; set escalation: true (or false to keep it off)"
            )
        return self

    @property
    def handoff_rules(self) -> HandoffRules:
        return self.handoff or HandoffRules()

    @property
    def turn_timeout_s(self) -> float:
        return self.turn_timeout_ms / 1000


class LifecycleMemory(BaseModel):
    """What the lifecycle keeps per session, under ``session.metadata["lifecycle"]``."""

    model_config = ConfigDict(extra="ignore")

    turns: int = 0
    consecutive_fallbacks: int = 0
    handoff: dict[str, Any] | None = None
    state: dict[str, str] = Field(default_factory=dict)
    language: str | None = None
    flow_skills: list[str] = Field(default_factory=list)  # flow_only skills a start named
    goal: dict[str, Any] | None = None  # the active skill goal: {"skill", "answers"}
    web_searches: int = 0  # web searches this conversation made

    @classmethod
    def read(cls, metadata: dict[str, Any]) -> LifecycleMemory:
        raw = metadata.get("lifecycle")
        return cls.model_validate(raw) if isinstance(raw, dict) else cls()

    def write(self, metadata: dict[str, Any]) -> None:
        metadata["lifecycle"] = self.model_dump(mode="json")
