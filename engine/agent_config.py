"""``AgentConfig``: the validated, immutable configuration of an agent that the phases read.

Its own module, importing nothing of the phases, the turn state or ``Agent``, so the phases and
the turn state can depend on it while ``Agent`` (``engine.agent``), which validates it and
composes the phases, depends on them: the imports go one way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.clock import Clock
from engine.config import (
    Action,
    BusinessHours,
    CompactionConfig,
    FieldSpec,
    Flow,
    IdleSpeaker,
    Instruction,
    MentionTrigger,
    MessageTrigger,
    SilenceTrigger,
    Tool,
)
from engine.lifecycle.settings import Lifecycle
from engine.providers.base import Provider

__all__ = ["AgentConfig"]


@dataclass(frozen=True)
class AgentConfig:
    """The validated configuration the phases read."""

    name: str
    persona: str | None
    goal: str | None
    knowledge: tuple[str, ...]
    provider: Provider | None
    clock: Clock
    fields: Mapping[str, FieldSpec]
    flows: tuple[Flow, ...]
    flow_map: Mapping[str, Flow]
    actions: Mapping[str, Action]
    events: Mapping[str, Any]
    conditions: Mapping[str, Callable[..., Any]]
    tools: Mapping[str, Tool]
    instructions: tuple[Instruction, ...]
    idle: IdleSpeaker | None
    idle_silent: bool
    compaction: CompactionConfig | None
    max_tool_loops: int
    business_hours: BusinessHours | None
    lifecycle: Lifecycle | None = None  # opt-in hand-off, built-in tools, limits, language
    # Per-kind trigger indexes, so a turn does not scan every flow's triggers: (flow, index,
    # trigger) for the first trigger of each kind per flow, in flow order.
    message_triggers: tuple[tuple[Flow, int, MessageTrigger], ...] = field(default=())
    mention_triggers: tuple[tuple[Flow, int, MentionTrigger], ...] = field(default=())
    silence_triggers: tuple[tuple[Flow, int, SilenceTrigger], ...] = field(default=())
    # Whether any flow has a wait step with an ``else`` (taken when the customer replies to a
    # run parked there); when none has, a message turn skips looking through the live runs.
    waits_with_else: bool = True
