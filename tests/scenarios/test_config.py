"""The constructor checks the configuration before any turn runs, and says where."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_a_template_naming_an_unknown_field_is_refused() -> None:
    """A say, a question, a do's with and a flow move's input may only template declared
    fields: a typo fails at construction instead of rendering empty on every turn."""
    error = rejects([flow([{"id": "oven", "say": "Your {{toping}} is in the oven"}])],
                    step_id="oven")
    assert "{{toping}}" in str(error) and "'toping'" in str(error)
    rejects([flow([{"id": "q", "question": "Still {{data.nomes}}?", "collect": ["nome"]}])],
            step_id="q")
    rejects(
        [flow([{"id": "d", "do": "notify", "with": {"to": {"who": ["{{nmoe}}"]}}}])],
        step_id="d",
        actions={"notify": lambda ctx: None},
    )
    rejects(
        [flow([{"id": "a", "say": "x", "then": {"flow": "g", "input": {"n": "{{idade}}"}}}]),
         {"id": "g", "steps": [{"id": "b", "say": "y"}]}],
        step_id="a",
    )
    build([flow([{"id": "ok", "say": "{{nome}} {{ data.nome }} {{context.shop}} {{input.x.y}}"}])])


def test_shape_errors_name_the_field_the_flow_and_the_step() -> None:
    """Every shape error says where: the field, the flow by id (else its index), the step by id
    (else its index), the trigger; never a pydantic class name."""
    with pytest.raises(FlowConfigurationError) as caught:
        build([], fields={"nome": {"type": "string"}, "sabor": {"type": "str"}})
    assert caught.value.field == "sabor"
    assert str(caught.value).startswith("field 'sabor': type: Input should be 'string'")

    with pytest.raises(FlowConfigurationError) as caught:
        build([flow([{"id": "a", "say": "x"}]), {"on": [], "steps": [{"id": "b", "say": "y"}]}])
    assert caught.value.flow_index == 1 and caught.value.flow_id is None
    assert str(caught.value) == "flows[1] (no id): id: Field required"

    error = rejects([flow([{"id": "a", "say": "x"}, {"wait": {"ms": 5}}])], step_id=None)
    assert error.step_index == 1
    assert str(error) == "flow 'f', steps[1] (no id), a wait step: id: Field required"

    error = rejects([flow([{"id": "w", "wait": {"ms": -1}}])], step_id="w")
    assert str(error) == "flow 'f', step 'w': wait.ms: Input should be greater than or equal to 0"
    assert "TimerWait" not in str(error)

    error = rejects([{"id": "f", "on": [{"message": "hi"}], "steps": [{"id": "a", "say": "x"}]}])
    assert str(error) == "flow 'f', trigger on[0] (message): message: Input should be a valid list"

    error = rejects([{"id": "f", "on": [{"mention": ["x"], "extract": {"qtd": {"type": "int"}}}],
                      "steps": [{"id": "a", "say": "x"}]}])
    assert error.field == "qtd" and "trigger on[0] (mention), field 'qtd': type:" in str(error)

    with pytest.raises(FlowConfigurationError, match=r"^tool 'lookup': "):
        build([], tools={"lookup": {"description": 3}})
    with pytest.raises(FlowConfigurationError, match=r"^field 'plano': enum: the list is empty"):
        build([], fields={"plano": {"type": "string", "enum": []}})


config_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(
        st.sampled_from(["id", "on", "steps", "say", "wait", "ms", "collect", "then", "type",
                         "message", "if", "known", "do", "with", "enum", "x"]),
        inner,
        max_size=4,
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(flows=st.lists(config_values, max_size=2), fields=st.dictionaries(
    st.text(max_size=5), config_values, max_size=2))
def test_any_configuration_builds_or_fails_with_a_configuration_error(
    flows: list[Any], fields: dict[str, Any]
) -> None:
    """Arbitrary flows and fields either build an agent or raise FlowConfigurationError; no
    other exception escapes the constructor."""
    try:
        Agent(name="Ana", provider=MockProvider([]), flows=flows, fields=fields)
    except FlowConfigurationError as error:
        assert str(error)
