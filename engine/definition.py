"""An agent as a JSON document: everything that is data, built into an ``Agent`` by the same
construction checks as Python code.

A hosted deployment runs thousands of agents that an agent builder or an API writes; none of
them is a Python module. ``AgentDefinition`` holds what is data (persona, instructions, fields,
flows, triggers, lifecycle settings, skills, tool descriptions); what must stay code comes from
``engine.packs`` by name: ``do`` actions, registered conditions, tool handlers, web search and
knowledge backends. ``check_definition`` parses a document and builds its agent, so a document
with a bad flow, or naming an action no listed pack provides, is refused when it is stored
(``DefinitionError``, naming the flow and step), never on the turn that first reaches it.

The JSON Schema editors use (``docs/agent.schema.json``) is ``definition_schema()``: generated
from these same models, so it cannot drift from what is accepted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from engine import strict_json
from engine.agent import Agent
from engine.clock import Clock
from engine.config import (
    BusinessHours,
    CompactionConfig,
    FieldSpec,
    Flow,
    IdleSpeaker,
    Instruction,
    parse_model,
)
from engine.errors import FlowConfigurationError
from engine.lifecycle.settings import (
    WEB_SEARCHES_PER_CONVERSATION,
    LifecycleData,
    PlanCheck,
)
from engine.packs import PackError, PackSet
from engine.providers.base import Provider

__all__ = [
    "MAX_DEFINITION_BYTES",
    "AgentDefinition",
    "DefinitionError",
    "HostHooks",
    "build_agent",
    "canonical_json",
    "check_definition",
    "definition_digest",
    "definition_schema",
    "parse_definition",
]

MAX_DEFINITION_BYTES = 2_000_000
"""The largest document accepted: a definition is read on every agent build."""

MAX_DEPTH = 64
"""The deepest nesting accepted: conditions nest (``all``/``any``/``not``) and are checked
recursively, and the store's JSON decoder stops at about 200 levels."""

ID_MAX_CHARS = 256


class DefinitionError(ValueError):
    """A document that is not a valid agent definition; the message says where and why."""


class _Doc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class ToolDefinition(_Doc):
    """A tool the model may call: its description and JSON Schema parameters are data, its
    handler is a pack's tool named by ``handler``."""

    description: str = ""
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    handler: str = Field(min_length=1)


class WebSearchDefinition(_Doc):
    """The agent's web search source; ``backend`` names a pack's web search backend."""

    enabled: bool = True
    allowed_domains: list[str] = Field(default_factory=list)
    max_per_conversation: int = Field(default=WEB_SEARCHES_PER_CONVERSATION, ge=1)
    backend: str = Field(min_length=1)


# The settings that are data are declared once, in LifecycleData; the document adds the names
# of the pack backends that take the place of the host's objects.
class LifecycleDefinition(LifecycleData):
    """The lifecycle settings of ``engine.lifecycle.settings.Lifecycle`` that are data; the
    host supplies the plan check and the timer, packs the backends."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    # A pack's knowledge index; none: the host's index (or the in-memory one over knowledge).
    knowledge_backend: str | None = None
    web_search: WebSearchDefinition | None = None


class AgentDefinition(_Doc):
    """One agent as data. ``agent_id`` is unique in the deployment; ``workspace`` owns it and
    never changes; ``packs`` lists the code packs its names resolve in."""

    schema_: str | None = Field(default=None, alias="$schema")
    agent_id: str = Field(min_length=1, max_length=ID_MAX_CHARS)
    workspace: str = Field(min_length=1, max_length=ID_MAX_CHARS)
    name: str = Field(min_length=1)
    persona: str | None = None
    goal: str | None = None
    knowledge: str | list[str] | None = None
    packs: list[str] = Field(default_factory=list)
    fields: dict[str, FieldSpec] = Field(default_factory=dict)
    flows: list[Flow] = Field(default_factory=list)
    events: dict[str, dict[str, Any]] = Field(default_factory=dict)
    tools: dict[str, ToolDefinition] = Field(default_factory=dict)
    instructions: list[Instruction] = Field(default_factory=list)
    idle: str | IdleSpeaker | None = None
    compaction: CompactionConfig | None = None
    max_tool_loops: int = Field(default=5, ge=0)
    business_hours: BusinessHours | None = None
    lifecycle: LifecycleDefinition | None = None

    # Flows, fields and instructions go through the engine's own parsing, so their errors
    # name the flow (by id) and the step (by id) as an Agent built in Python does.
    @field_validator("flows", mode="before")
    @classmethod
    def _flows(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        return [parse_model(Flow, item, flow_index=i) for i, item in enumerate(value)]

    @field_validator("fields", mode="before")
    @classmethod
    def _fields(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return {k: parse_model(FieldSpec, v, field=str(k)) for k, v in value.items()}

    @field_validator("instructions", mode="before")
    @classmethod
    def _instructions(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        return [
            parse_model(Instruction, item, where=f"instructions[{i}]")
            for i, item in enumerate(value)
        ]


@dataclass(frozen=True)
class HostHooks:
    """What the host adds to an agent built from data: the plan check, a wrapper around the
    web search backend (the workspace's daily quota), a knowledge index used when the
    definition names no pack's own, and the workspace's whole Knowledge Base. With a plan check
    every agent is a hosted one: one with no ``lifecycle`` section gets the lifecycle's
    defaults (plan check, billing, outcomes)."""

    plan_check: PlanCheck | None = None
    wrap_web_search: Callable[[Any], Any] | None = None
    knowledge_index: Any = None
    workspace_knowledge: Any = None


def parse_definition(document: Any) -> AgentDefinition:
    """A document (JSON text, bytes or the decoded object) as an ``AgentDefinition``, or
    ``DefinitionError`` with the reason. Never raises anything else for any input."""
    if isinstance(document, str | bytes):
        if len(document) > MAX_DEFINITION_BYTES:
            raise DefinitionError(f"document longer than {MAX_DEFINITION_BYTES} bytes")
        try:
            document = strict_json.loads(document)
        except (ValueError, RecursionError) as exc:
            raise DefinitionError(f"not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise DefinitionError(f"a definition is a JSON object, not {type(document).__name__}")
    if strict_json.depth(document, MAX_DEPTH) > MAX_DEPTH:
        raise DefinitionError(f"objects and lists nested deeper than {MAX_DEPTH} levels")
    try:
        return AgentDefinition.model_validate(document)
    except FlowConfigurationError as exc:
        raise DefinitionError(str(exc)) from None
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        raise DefinitionError(f"{where}: {error['msg']}" if where else error["msg"]) from None


def build_agent(
    definition: AgentDefinition,
    packs: PackSet,
    *,
    provider: Provider | None = None,
    clock: Clock | None = None,
    host: HostHooks | None = None,
) -> Agent:
    """The engine's ``Agent`` for ``definition``, its names resolved in ``packs``; raises
    ``DefinitionError`` (a bad name, an unknown pack) naming the flow and step."""
    host = host or HostHooks()
    try:
        code = packs.select(definition.packs)
        tools: dict[str, Any] = {}
        for name, tool in definition.tools.items():
            handler = code["tools"].get(tool.handler)
            if handler is None:
                raise PackError(f"tool {name!r}: no listed pack has the handler {tool.handler!r}")
            tools[name] = {
                "description": tool.description,
                "parameters": tool.parameters,
                "handler": handler,
            }
        events = {**code["events"], **definition.events}
        return Agent(
            name=definition.name,
            persona=definition.persona,
            goal=definition.goal,
            knowledge=definition.knowledge,
            provider=provider,
            clock=clock,
            fields=definition.fields,
            flows=definition.flows,
            actions=code["actions"],
            events=events,
            conditions=code["conditions"],
            tools=tools,
            instructions=definition.instructions,
            idle=definition.idle,
            compaction=definition.compaction,
            max_tool_loops=definition.max_tool_loops,
            business_hours=definition.business_hours,
            lifecycle=(
                _lifecycle(definition, code, host)
                if definition.lifecycle is not None or host.plan_check is not None
                else None
            ),
        )
    except (FlowConfigurationError, PackError) as exc:
        raise DefinitionError(str(exc)) from None


def check_definition(
    document: Any, packs: PackSet, *, provider: Provider | None = None
) -> tuple[AgentDefinition, Agent]:
    """Parse and build: what a registry does before it stores a version."""
    definition = parse_definition(document)
    return definition, build_agent(definition, packs, provider=provider)


def _lifecycle(definition: AgentDefinition, code: dict[str, dict[str, Any]],
               host: HostHooks) -> dict[str, Any]:
    # A host that checks plans (a registry deployment) hosts every agent: a definition with no
    # lifecycle section gets the lifecycle's defaults, so it is plan-checked and billed too.
    settings = definition.lifecycle if definition.lifecycle is not None else LifecycleDefinition()
    # Only what the document set, as parsed: Lifecycle applies its own defaults and its checks
    # of what was left unset (``escalation`` beside ``tools.handoff``).
    values: dict[str, Any] = {
        name: getattr(settings, name)
        for name in settings.model_fields_set - {"web_search", "knowledge_backend"}
    }
    values["agent_id"] = definition.agent_id
    values["plan_check"] = host.plan_check
    if settings.knowledge_backend is not None:
        index = code["knowledge"].get(settings.knowledge_backend)
        if index is None:
            raise PackError(
                f"lifecycle.knowledge_backend: no listed pack has {settings.knowledge_backend!r}"
            )
        values["knowledge_index"] = index
    elif host.knowledge_index is not None:
        values["knowledge_index"] = host.knowledge_index
    if host.workspace_knowledge is not None:
        values["workspace_knowledge"] = host.workspace_knowledge
    source = settings.web_search
    if source is not None:
        backend = code["web_search"].get(source.backend)
        if backend is None:
            raise PackError(f"lifecycle.web_search.backend: no listed pack has {source.backend!r}")
        if host.wrap_web_search is not None:
            backend = host.wrap_web_search(backend)
        values["web_search"] = {**source.model_dump(exclude={"backend"}), "backend": backend}
    return values


def canonical_json(document: Any) -> str:
    """The document as compact JSON with sorted keys: equal documents, equal text."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def definition_digest(document: Any) -> str:
    """The sha256 of ``canonical_json(document)``: a version is stored only when it changes."""
    return hashlib.sha256(canonical_json(document).encode("utf-8", "surrogatepass")).hexdigest()


def definition_schema() -> dict[str, Any]:
    """The JSON Schema of an agent definition, from the models above."""
    schema = AgentDefinition.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "turnflow agent definition"
    return schema


if __name__ == "__main__":  # python -m engine.definition > docs/agent.schema.json
    print(json.dumps(definition_schema(), indent=2, sort_keys=True, ensure_ascii=False))
