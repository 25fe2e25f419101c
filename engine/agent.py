"""``Agent``: validated, immutable configuration; ``Agent.turn`` runs the eight phases.

One agent serves every session. It holds no session, context or history of its own: those
arrive with each ``turn()``. Every name a flow uses is checked here, so a bad name raises
``FlowConfigurationError`` when the agent is built, never on the turn that first reaches it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from engine.agent_config import AgentConfig
from engine.clock import Clock, SystemClock
from engine.conditions import check
from engine.config import (
    Action,
    BusinessHours,
    CompactionConfig,
    DoStep,
    EventTrigger,
    EventWait,
    FieldSpec,
    Flow,
    FlowMove,
    IdleSpeaker,
    IfStep,
    Instruction,
    MentionTrigger,
    MessageTrigger,
    Move,
    SayStep,
    SilenceTrigger,
    StepMove,
    TalkStep,
    Tool,
    WaitStep,
    parse_model,
)
from engine.errors import FlowConfigurationError
from engine.lifecycle import images, plan
from engine.lifecycle.settings import Lifecycle, workspace_problem
from engine.lifecycle.turn import prepare as prepare_lifecycle
from engine.phases import (
    advance,
    decide,
    fallback,
    finish,
    ingest,
    load,
    migrate,
    settle,
    speak,
    understand,
)
from engine.providers.base import Provider
from engine.recording import note_session
from engine.request import HistoryEntry, TurnRequest, TurnResult
from engine.values import template_fields

T = TypeVar("T")


class _Keep:
    """The default of ``Agent.replaced(provider=...)``: leave the provider as it is."""


_KEEP = _Keep()


def _fail(message: str, flow: Flow | None = None, step_id: str | None = None) -> None:
    raise FlowConfigurationError(message, flow_id=flow.id if flow else None, step_id=step_id)


class Agent:
    """Immutable agent configuration; ``await agent.turn(request)`` runs one turn."""

    __slots__ = ("_config",)
    _config: AgentConfig

    def __init__(
        self,
        *,
        name: str,
        persona: str | None = None,
        goal: str | None = None,
        knowledge: str | list[str] | None = None,
        provider: Provider | None = None,
        clock: Clock | None = None,
        fields: Mapping[str, FieldSpec | dict[str, Any]] | None = None,
        flows: Sequence[Flow | dict[str, Any]] | None = None,
        actions: Mapping[str, Action | Callable[..., Any]] | None = None,
        events: Mapping[str, Any] | None = None,
        conditions: Mapping[str, Callable[..., Any]] | None = None,
        tools: Mapping[str, Tool | dict[str, Any]] | None = None,
        instructions: Sequence[Instruction | dict[str, Any]] | None = None,
        idle: str | IdleSpeaker | dict[str, Any] | None = None,
        compaction: CompactionConfig | dict[str, Any] | None = None,
        max_tool_loops: int = 5,
        business_hours: BusinessHours | dict[str, Any] | None = None,
        lifecycle: Lifecycle | dict[str, Any] | None = None,
    ) -> None:
        field_specs = {k: parse_model(FieldSpec, v, field=k) for k, v in (fields or {}).items()}
        parsed_flows = tuple(
            parse_model(Flow, f, flow_index=i) for i, f in enumerate(flows or [])
        )
        action_map = {
            k: v if isinstance(v, Action) else Action(handler=v) for k, v in (actions or {}).items()
        }
        tool_map = {
            k: parse_model(Tool, v, where=f"tool {k!r}") for k, v in (tools or {}).items()
        }
        idle_silent = idle == "silent"
        idle_speaker: IdleSpeaker | None = None
        if isinstance(idle, str) and not idle_silent:
            idle_speaker = IdleSpeaker(prompt=idle)
        elif isinstance(idle, IdleSpeaker | dict):
            idle_speaker = parse_model(IdleSpeaker, idle, where="idle")
        if max_tool_loops < 0:
            _fail("max_tool_loops must be >= 0")
        if isinstance(knowledge, str):
            knowledge_items: tuple[str, ...] = (knowledge,)
        else:
            knowledge_items = tuple(knowledge or ())
        flow_map: dict[str, Flow] = {}
        for flow in parsed_flows:
            if flow.id in flow_map:
                _fail("duplicate flow id", flow)
            flow_map[flow.id] = flow
        config = AgentConfig(
            name=name,
            persona=persona,
            goal=goal,
            knowledge=knowledge_items,
            provider=provider,
            clock=clock or SystemClock(),
            fields=field_specs,
            flows=parsed_flows,
            flow_map=flow_map,
            actions=action_map,
            events=dict(events or {}),
            conditions=dict(conditions or {}),
            tools=tool_map,
            instructions=tuple(
                parse_model(Instruction, item, where=f"instructions[{i}]")
                for i, item in enumerate(instructions or [])
            ),
            idle=idle_speaker,
            idle_silent=idle_silent,
            compaction=(
                parse_model(CompactionConfig, compaction, where="compaction")
                if compaction
                else None
            ),
            max_tool_loops=max_tool_loops,
            business_hours=(
                parse_model(BusinessHours, business_hours, where="business_hours")
                if business_hours
                else None
            ),
            lifecycle=(
                prepare_lifecycle(parse_model(Lifecycle, lifecycle, where="lifecycle"))
                if lifecycle is not None
                else None
            ),
            message_triggers=_first_triggers(parsed_flows, MessageTrigger),
            mention_triggers=_first_triggers(parsed_flows, MentionTrigger),
            silence_triggers=_first_triggers(parsed_flows, SilenceTrigger),
            waits_with_else=any(
                isinstance(step, WaitStep) and step.else_ is not None
                for flow in parsed_flows
                for step in flow.steps
            ),
        )
        _validate(config)
        object.__setattr__(self, "_config", config)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Agent is immutable")

    @property
    def config(self) -> AgentConfig:
        return self._config

    def with_knowledge_index(self, index: Any) -> Agent:
        """This agent with ``index`` behind ``search_knowledge`` (e.g. the service's PostgreSQL
        index); the agent itself is left unchanged."""
        if self._config.lifecycle is None:
            raise ValueError("the agent has no lifecycle settings")
        return self._sharing(
            lifecycle=self._config.lifecycle.model_copy(update={"knowledge_index": index})
        )

    def with_workspace_knowledge(self, index: Any) -> Agent:
        """This agent with ``index``, its workspace's whole Knowledge Base (a
        ``WorkspaceKnowledgeIndex``), behind ``search_knowledge`` when it has no sources of its
        own; the agent itself is left unchanged. A host running many agents passes each the
        index of its own workspace."""
        if self._config.lifecycle is None:
            raise FlowConfigurationError("lifecycle: the agent has no lifecycle settings")
        problem = workspace_problem(index)
        if problem is not None:
            raise FlowConfigurationError(f"lifecycle: {problem}")
        return self._sharing(
            lifecycle=self._config.lifecycle.model_copy(update={"workspace_knowledge": index})
        )

    def replaced(
        self, *, provider: Provider | _Keep | None = _KEEP, clock: Clock | None = None
    ) -> Agent:
        """This agent with another provider and/or clock, everything else shared; the agent
        itself is left unchanged. Recording and replaying turns swap exactly these two."""
        changes: dict[str, Any] = {}
        if not isinstance(provider, _Keep):
            changes["provider"] = provider
        if clock is not None:
            changes["clock"] = clock
        return self._sharing(**changes)

    def _sharing(self, **changes: Any) -> Agent:
        """A new agent with this one's config but ``changes``: the pieces the ``with_*`` and
        ``replaced`` copies swap are checked by them, so the construction checks of
        ``__init__`` are not run again."""
        agent = object.__new__(Agent)
        object.__setattr__(agent, "_config", replace(self._config, **changes))
        return agent

    @property
    def name(self) -> str:
        return self._config.name

    @property
    def flows(self) -> tuple[Flow, ...]:
        return self._config.flows

    @property
    def fields(self) -> Mapping[str, FieldSpec]:
        return self._config.fields

    async def turn(self, request: TurnRequest | dict[str, Any]) -> TurnResult:
        """One turn: the eight phases of docs/concepts.md, in order."""
        # A session dict inside a dict request is validated into a Session no caller holds:
        # Load lets the turn write that one instead of copying it again.
        stored = request.get("session") if isinstance(request, dict) else None
        parsed = TurnRequest.parse(request)
        # Entries validated here from dicts are the turn's alone; entries the host made are
        # frozen, so the turn shares them too (and keeps their chat messages on them).
        fresh = isinstance(request, dict) and _validated_here(request.get("history"))
        kept = not fresh and _shareable(parsed.history)
        state = await load.run(  # 1 Load
            self._config,
            parsed,
            stored if isinstance(stored, dict) else None,
            history_owned=fresh or kept,
        )
        state.history_kept = kept
        migrate.run(state)  # parked runs renamed to a new version's ids, when the host asks
        if parsed.fallback is not None:  # the host gave up waiting for the model
            ingest.run(state)  # 2 Ingest: the ids and last_user_at, nothing moves
            fallback.run(state)  # the fallback message instead of phases 3-6
            await settle.run(state)  # 7 Settle
            result = finish.run(state)  # 8 Return
            note_session(result.session)
            return result
        if self._config.lifecycle is not None:  # (both do nothing without lifecycle settings)
            await plan.check(state)  # lifecycle step 1: the host's plan check, before any call
            await images.read(state)  # lifecycle step 2: the customer's images, when read at all
        ingest.run(state)  # 2 Ingest
        await understand.run(state)  # 3 Understand
        decide.run(state)  # 4 Decide
        await advance.run(state)  # 5 Run
        await speak.run(state)  # 6 Speak
        await settle.run(state)  # 7 Settle
        result = finish.run(state)  # 8 Return
        note_session(result.session)  # the state it left, for a recording open around the turn
        return result


def _validated_here(history: Any) -> bool:
    """Whether the history entries of a dict request were all built by its validation (given as
    dicts in a list or tuple), so that no caller holds them (None: no history, nothing held)."""
    if history is None:
        return True
    return isinstance(history, list | tuple) and all(type(entry) is dict for entry in history)


def _shareable(entries: list[HistoryEntry]) -> bool:
    """Whether every entry is a ``HistoryEntry`` itself: frozen, so the turn needs no copy of
    it (a subclass may have made itself editable: those are copied)."""
    return all(type(entry) is HistoryEntry for entry in entries)


def _first_triggers(flows: tuple[Flow, ...], kind: type[T]) -> tuple[tuple[Flow, int, T], ...]:
    out = []
    for flow in flows:
        for index, trigger in enumerate(flow.on):
            if isinstance(trigger, kind):
                out.append((flow, index, trigger))
                break
    return tuple(out)


# --- construction checks -----------------------------------------------------------------------


def _validate(config: AgentConfig) -> None:
    for name, spec in config.fields.items():
        if spec.enum is not None and not spec.enum:
            raise FlowConfigurationError("enum: the list is empty", field=name)
    for instruction in config.instructions:
        _check_condition(config, instruction.if_, None, None)
    if config.idle:
        for tool in config.idle.tools:
            if tool not in config.tools:
                _fail(f"idle speaker names unknown tool {tool!r}")
    for flow in config.flows:
        _validate_flow(config, flow)


def _check_condition(
    config: AgentConfig, cond: Any, flow: Flow | None, step_id: str | None
) -> None:
    problem = check(cond, config.conditions, config.fields)
    if problem:
        _fail(problem, flow, step_id)


def _check_fields(config: AgentConfig, names: list[str], flow: Flow, step_id: str | None) -> None:
    for name in names:
        if name not in config.fields:
            _fail(f"unknown field {name!r}", flow, step_id)


def _check_templates(
    config: AgentConfig, value: Any, flow: Flow, step_id: str | None
) -> None:
    """A template naming an undeclared field would render empty on every turn: refuse it."""
    for template, name in template_fields(value):
        if name not in config.fields:
            _fail(f"template {template} names unknown field {name!r}", flow, step_id)


def _check_move(
    config: AgentConfig, move: Move | None, flow: Flow, step_id: str | None
) -> None:
    if move is None or move == "end":
        return
    if isinstance(move, str):
        if flow.step(move) is None:
            _fail(f"move names unknown step {move!r}", flow, step_id)
    elif isinstance(move, StepMove):
        if flow.step(move.step) is None:
            _fail(f"move names unknown step {move.step!r}", flow, step_id)
        _check_fields(config, move.clear, flow, step_id)
    elif isinstance(move, FlowMove):
        if move.flow not in config.flow_map:
            _fail(f"move names unknown flow {move.flow!r}", flow, step_id)
        _check_templates(config, move.input, flow, step_id)


def _validate_flow(config: AgentConfig, flow: Flow) -> None:
    seen: set[str] = set()
    for step in flow.steps:
        if step.id in seen:
            _fail("duplicate step id", flow, step.id)
        if step.id in ("end",):
            _fail("'end' is reserved and cannot be a step id", flow, step.id)
        seen.add(step.id)
    _check_condition(config, flow.when, flow, None)
    _check_fields(config, flow.clear_on_start, flow, None)
    _check_move(config, flow.on_correction, flow, None)
    for instruction in flow.instructions:
        _check_condition(config, instruction.if_, flow, None)
    for trigger in flow.on:
        _check_condition(config, trigger.if_, flow, None)
        if isinstance(trigger, EventTrigger) and trigger.event not in config.events:
            _fail(f"unknown event {trigger.event!r}", flow)
        if isinstance(trigger, MentionTrigger | SilenceTrigger | MessageTrigger):
            continue
    for step in flow.steps:
        _check_move(config, step.then, flow, step.id)
        if isinstance(step, TalkStep):
            _check_fields(config, step.collect, flow, step.id)
            _check_templates(config, step.question, flow, step.id)
            _check_move(config, step.on_correction, flow, step.id)
            for tool in step.tools:
                if tool not in config.tools:
                    _fail(f"unknown tool {tool!r}", flow, step.id)
            for branch in step.branches:
                if (branch.if_ is None) == (branch.when is None):
                    _fail("a branch has exactly one of if / when", flow, step.id)
                _check_condition(config, branch.if_, flow, step.id)
                _check_move(config, branch.then, flow, step.id)
            for j, raw in enumerate(step.instructions):
                instruction = parse_model(
                    Instruction, raw, flow_id=flow.id, where=f"step {step.id!r} instructions[{j}]"
                )
                _check_condition(config, instruction.if_, flow, step.id)
        elif isinstance(step, DoStep):
            action = config.actions.get(step.do)
            if action is None:
                _fail(f"unknown action {step.do!r}", flow, step.id)
            _check_templates(config, step.with_, flow, step.id)
            if action is not None and action.params:
                extra = sorted(set(step.with_) - set(action.params))
                if extra:
                    _fail(f"with key {extra[0]!r} is not a parameter of {step.do!r}", flow, step.id)
            _check_move(config, step.on_fail, flow, step.id)
        elif isinstance(step, WaitStep):
            if isinstance(step.wait, EventWait) and step.wait.event not in config.events:
                _fail(f"unknown event {step.wait.event!r}", flow, step.id)
            _check_move(config, step.else_, flow, step.id)
        elif isinstance(step, IfStep):
            _check_condition(config, step.if_, flow, step.id)
            _check_move(config, step.else_, flow, step.id)
        elif isinstance(step, SayStep):
            _check_templates(config, step.say, flow, step.id)
