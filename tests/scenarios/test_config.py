"""Seed 001: the constructor checks the configuration before any turn runs."""

from __future__ import annotations

from typing import Any

import pytest

from engine import Action, Agent, FieldSpec, Flow, FlowConfigurationError, MockProvider, Tool

FIELDS = {"nome": {"type": "string"}}


def build(flows: list[Any], **extra: Any) -> Agent:
    extra.setdefault("fields", FIELDS)
    return Agent(name="Ana", provider=MockProvider([]), flows=flows, **extra)


def flow(steps: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"id": "f", "on": [{"message": []}], "steps": steps, **extra}


def rejects(
    flows: list[Any], *, flow_id: str | None = "f", step_id: str | None = None, **extra: Any
) -> FlowConfigurationError:
    with pytest.raises(FlowConfigurationError) as caught:
        build(flows, **extra)
    assert caught.value.flow_id == flow_id
    assert caught.value.step_id == step_id
    if flow_id:
        assert repr(flow_id) in str(caught.value)
    return caught.value


def test_duplicate_flow_ids() -> None:
    """The constructor checks the configuration before any turn runs: duplicate flow ids."""
    rejects([flow([{"id": "a", "say": "x"}]), flow([{"id": "b", "say": "y"}])])


def test_duplicate_step_ids() -> None:
    """engine.md: duplicate step ids in a flow."""
    rejects([flow([{"id": "a", "say": "x"}, {"id": "a", "say": "y"}])], step_id="a")


def test_unknown_field() -> None:
    """every field ... a flow names."""
    rejects([flow([{"id": "t", "collect": ["email"]}])], step_id="t")
    rejects([flow([{"id": "a", "say": "x"}], clear_on_start=["email"])])
    rejects([flow([{"id": "c", "if": {"known": "email"}, "then": "end"}])], step_id="c")


def test_unknown_action_and_with_keys() -> None:
    """every ... action ... a flow names; the with of each do step against the action's
    parameters."""
    rejects([flow([{"id": "d", "do": "notify"}])], step_id="d")
    action = Action(lambda ctx: None, params={"to": "string"})
    rejects(
        [flow([{"id": "d", "do": "notify", "with": {"channel": "x"}}])],
        step_id="d",
        actions={"notify": action},
    )
    build([flow([{"id": "d", "do": "notify", "with": {"to": "x"}}])], actions={"notify": action})


def test_unknown_event() -> None:
    """every ... event ... a flow names."""
    rejects([{"id": "f", "on": [{"event": "paid"}], "steps": [{"id": "a", "say": "x"}]}])
    rejects([flow([{"id": "w", "wait": {"event": "paid"}}])], step_id="w")


def test_unknown_condition() -> None:
    """every ... condition ... a flow names."""
    rejects([flow([{"id": "c", "if": {"inStage": "x"}, "then": "end"}])], step_id="c")
    build(
        [flow([{"id": "c", "if": {"inStage": "x"}, "then": "end"}])],
        conditions={"inStage": lambda ctx, arg: True},
    )


def test_unknown_tool_and_idle_tools() -> None:
    """every ... tool ... a flow names; the idle speaker's tool names."""
    rejects([flow([{"id": "t", "prompt": "p", "tools": ["lookup"]}])], step_id="t")
    with pytest.raises(FlowConfigurationError):
        build([], idle={"prompt": "p", "tools": ["lookup"]})
    tool = Tool(description="d", handler=lambda args: {})
    build([], idle={"prompt": "p", "tools": ["lookup"]}, tools={"lookup": tool})


def test_unknown_step_or_flow_in_a_move() -> None:
    """every ... step id a flow names; a then/else naming a missing step or flow."""
    rejects([flow([{"id": "a", "say": "x", "then": "nowhere"}])], step_id="a")
    rejects([flow([{"id": "a", "say": "x", "then": {"flow": "nowhere"}}])], step_id="a")
    rejects([flow([{"id": "a", "if": {"known": "nome"}, "then": "end", "else": "x"}])], step_id="a")


def test_bad_shape_names_flow_and_step() -> None:
    """A bad name throws FlowConfigurationError when the agent is built."""
    error = rejects([flow([{"id": "a", "say": "x"}, {"id": "w", "wait": {"ms": -1}}])], step_id="w")
    assert "WaitStep" in str(error) or "wait" in str(error)


def test_models_are_accepted_as_well_as_dicts() -> None:
    """Config arguments accept plain dicts/lists or the equivalent pydantic models."""
    model = Flow.model_validate(flow([{"id": "a", "say": "x"}]))
    agent = build([model], fields={"nome": FieldSpec(type="string")})
    assert agent.flows[0] is model and agent.fields["nome"].type == "string"


def test_agent_is_immutable() -> None:
    """An Agent is immutable configuration."""
    agent = build([flow([{"id": "a", "say": "x"}])])
    with pytest.raises(AttributeError):
        agent.name = "Bia"  # type: ignore[misc]  # the point of the test


def test_more_shape_checks() -> None:
    """The constructor checks the configuration before any turn runs (shapes the seeds imply)."""
    rejects([flow([{"id": "end", "say": "x"}])], step_id="end")
    rejects([flow([{"id": "t", "prompt": "p", "branches": [{"then": "end"}]}])], step_id="t")
    rejects(
        [
            flow(
                [
                    {
                        "id": "t",
                        "prompt": "p",
                        "branches": [{"when": "q?", "if": {"known": "nome"}, "then": "end"}],
                    }
                ]
            )
        ],
        step_id="t",
    )
    rejects([flow([{"id": "a", "say": "x", "then": {"step": "zz"}}])], step_id="a")
    rejects([flow([{"id": "a", "say": "x", "then": {"step": "a", "clear": ["zz"]}}])], step_id="a")
    with pytest.raises(FlowConfigurationError):
        build([], fields={"plano": {"type": "string", "enum": []}})
    with pytest.raises(FlowConfigurationError):
        build([], max_tool_loops=-1)
    with pytest.raises(FlowConfigurationError):
        build([], instructions=[{"must": "x", "if": {"nope": 1}}])


def test_idle_and_knowledge_forms() -> None:
    """idle: None | "silent" | "a prompt" | {"prompt", "tools"}; knowledge: str or list[str]."""
    silent = build([], idle="silent", knowledge="K")
    assert silent.config.idle_silent and silent.config.knowledge == ("K",)
    prompted = build([], idle="Responda curto.", knowledge=["A", "B"])
    assert prompted.config.idle is not None and prompted.config.idle.prompt == "Responda curto."
    assert prompted.config.knowledge == ("A", "B") and prompted.name == "Ana"
