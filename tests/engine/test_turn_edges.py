"""Turn paths the scenario files do not reach: stack unwinding, resumes, tool errors, failures."""

from __future__ import annotations

from typing import Any

import pytest

from engine import (
    Agent,
    FakeClock,
    MockExhausted,
    MockProvider,
    ModelResponse,
    ProviderError,
    Tool,
    ToolCall,
)

START = "2026-01-05T09:00:00Z"
FIELDS: dict[str, Any] = {
    "nome": {"type": "string", "ask": "Pergunte o nome."},
    "idade": {"type": "integer"},
    "plano": {"type": "string", "enum": ["basic", "pro"]},
}


def build(provider: MockProvider, **config: Any) -> Agent:
    config.setdefault("fields", FIELDS)
    return Agent(name="Ana", provider=provider, clock=FakeClock(START), **config)


def run(run_id: str, flow_id: str, step_id: str, status: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": run_id,
        "flow_id": flow_id,
        "step_id": step_id,
        "status": status,
        "started_at": START,
        **extra,
    }


def session(*runs: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": "s1", "v": 4, "runs": list(runs), "seq": 10, **extra}


def message(text: str = "oi", **extra: Any) -> dict[str, Any]:
    return {"session_id": "s1", "message": text, "id": "m1", **extra}


async def test_an_asker_that_moves_on_silently_hands_the_message_back() -> None:
    """An asker that moved on without a word hands the message back to the run it suspended."""
    flows = [
        {"id": "a", "steps": [{"id": "t", "prompt": "Retome o assunto A."}]},
        {"id": "b", "steps": [{"id": "t", "branches": [{"if": {"known": "nome"}, "then": "end"}]}]},
    ]
    provider = MockProvider([{"message": "Voltando ao assunto A."}])
    agent = build(provider, flows=flows)
    stored = session(
        run("r1", "a", "t", "suspended", suspended_seq=1),
        run("r2", "b", "t", "asking"),
        data={"nome": "Ana"},
    )
    result = await agent.turn(message(session=stored))
    assert [o.code for o in result.outcomes][:2] == ["branch", "completed"]
    assert [m.text for m in result.messages] == ["Voltando ao assunto A."]
    assert [(m.run_id, m.kind) for m in result.messages] == [("r1", "ai")]
    assert result.llm_calls == 1 and provider.calls[0].schema_name == "speak"


async def test_a_resumed_asker_judges_its_if_branches_first() -> None:
    """A run that returns to asking on a message has its step's if branches judged first."""
    flows = [
        {
            "id": "a",
            "steps": [
                {"id": "t", "prompt": "p", "branches": [{"if": {"known": "nome"}, "then": "s"}]},
                {"id": "s", "say": "Já sei seu nome, {{nome}}."},
            ],
        }
    ]
    agent = build(MockProvider([]), flows=flows, idle="silent")
    stored = session(run("r1", "a", "t", "suspended", suspended_seq=1), data={"nome": "Ana"})
    result = await agent.turn(message(session=stored))
    assert [m.text for m in result.messages] == ["Já sei seu nome, Ana."]
    assert "branch" in [o.code for o in result.outcomes] and result.llm_calls == 0


async def test_takeover_resumes_a_suspended_run_of_the_chosen_flow() -> None:
    """A suspended run of the chosen flow resumes instead of a new one starting."""
    flows = [
        {
            "id": "vendas",
            "on": [{"message": ["comprar"]}],
            "steps": [{"id": "v", "collect": ["nome"]}],
        },
        {"id": "suporte", "on": [{"message": ["ajuda"]}], "steps": [{"id": "s", "prompt": "S"}]},
    ]
    provider = MockProvider(
        [{"flows": {"vendas": 90, "suporte": 10}}, {"message": "Voltemos à compra.", "nome": None}]
    )
    agent = build(provider, flows=flows)
    stored = session(
        run("r1", "vendas", "v", "suspended", suspended_seq=1),
        run("r2", "suporte", "s", "asking"),
    )
    result = await agent.turn(message("quero comprar", session=stored))
    statuses = {r.id: r.status for r in result.session.runs}
    assert statuses == {"r1": "asking", "r2": "suspended"}
    assert result.started == [] and [m.run_id for m in result.messages] == ["r1"]
    assert result.llm_calls == 2


async def test_mention_extract_values_are_validated_into_the_input() -> None:
    """A trigger's extract values become the run's input (validated like fields)."""
    flows = [
        {
            "id": "preco",
            "on": [{"mention": ["preço"], "extract": {"qtd": {"type": "integer"}}}],
            "steps": [{"id": "p", "say": "Qtd {{input.qtd}}"}],
        }
    ]
    provider = MockProvider(
        [{"mentions": {"preco": True}, "extract": {"preco": {"qtd": "3"}}}],
    )
    agent = build(provider, flows=flows, idle="silent")
    result = await agent.turn(message("preço de 3?"))
    assert [m.text for m in result.messages] == ["Qtd 3"] and result.llm_calls == 1
    bad = MockProvider([{"mentions": {"preco": True}, "extract": {"preco": {"qtd": "três"}}}])
    again = await build(bad, flows=flows, idle="silent").turn(message("preço?"))
    assert "bad-value" in [o.code for o in again.outcomes]
    assert [m.text for m in again.messages] == ["Qtd "]


async def test_tool_errors_and_unknown_tools_go_back_to_the_model() -> None:
    """Tools run in rounds; their results go back as history, and it is asked again."""

    def lookup(args: dict[str, Any]) -> Any:
        raise RuntimeError("crm down")

    calls = [
        ModelResponse(
            tool_calls=[
                ToolCall(id="c1", name="lookup", arguments={}),
                ToolCall(id="c2", name="nope", arguments={}),
            ]
        ),
        {"message": "Não consegui consultar agora."},
    ]
    provider = MockProvider(calls)
    flows = [
        {
            "id": "f",
            "on": [{"message": []}],
            "steps": [{"id": "t", "prompt": "p", "tools": ["lookup"]}],
        }
    ]
    agent = build(provider, flows=flows, tools={"lookup": Tool(handler=lookup)})
    result = await agent.turn(message())
    tool_texts = [m.text for m in provider.calls[1].messages if m.role == "tool"]
    assert tool_texts == ['{"error": "crm down"}', '{"error": "unknown tool \'nope\'"}']
    assert result.llm_calls == 2 and [m.text for m in result.messages] == [
        "Não consegui consultar agora."
    ]


async def test_tool_data_patches_are_written_as_given() -> None:
    """Tool data patches are written as given."""
    tool = Tool(handler=lambda args, ctx: {"result": "ok", "data": {"crm_id": 7}})
    provider = MockProvider(
        [
            ModelResponse(tool_calls=[ToolCall(id="c1", name="save", arguments={"x": 1})]),
            {"message": "Salvo."},
        ]
    )
    flows = [
        {
            "id": "f",
            "on": [{"message": []}],
            "steps": [{"id": "t", "prompt": "p", "tools": ["save"]}],
        }
    ]
    result = await build(provider, flows=flows, tools={"save": tool}).turn(message())
    assert result.session.data == {"crm_id": 7}
    assert [m.text for m in provider.calls[1].messages if m.role == "tool"] == ["ok"]


async def test_idle_speaker_failure_is_retried_by_the_host_and_a_fatal_one_deferred() -> None:
    """The idle speaker has no step to re-park: a retryable failure is raised for the host to
    retry the message (nothing of the turn kept), a fatal one is deferred without a wake."""
    request = message()
    before = repr(request)
    with pytest.raises(ProviderError) as caught:
        await build(MockProvider([ProviderError("503")]), flows=[]).turn(request)
    assert caught.value.kind == "retryable" and repr(request) == before
    provider = MockProvider([ProviderError("401", kind="fatal")])
    result = await build(provider, flows=[]).turn(message())
    line = next(o for o in result.outcomes if o.code == "deferred")
    assert (line.step_id, line.llm_calls) == ("idle", 1)
    assert result.messages == [] and result.schedule == [] and result.llm_calls == 1


async def test_any_other_provider_exception_is_retryable() -> None:
    """Any non-ProviderError exception from a provider counts as retryable."""
    flows = [{"id": "f", "on": [{"message": []}], "steps": [{"id": "t", "collect": ["nome"]}]}]
    speak = await build(MockProvider([RuntimeError("socket")]), flows=flows).turn(message())
    assert len(speak.schedule) == 1 and ":retry:" in speak.schedule[0].key
    judged = [
        {"id": "v", "on": [{"message": ["comprar"]}], "steps": [{"id": "s", "say": "v"}]},
        {"id": "w", "on": [{"message": ["ajuda"]}], "steps": [{"id": "s", "say": "w"}]},
    ]
    with pytest.raises(ProviderError) as caught:
        await build(MockProvider([RuntimeError("socket")]), flows=judged).turn(message())
    assert caught.value.kind == "retryable"


async def test_one_call_too_many_fails_loudly() -> None:
    """The mock provider throws when it runs out of scripted replies, so a turn that spends one
    call too many fails loudly."""
    flows = [{"id": "f", "on": [{"message": []}], "steps": [{"id": "t", "collect": ["nome"]}]}]
    with pytest.raises(MockExhausted):
        await build(MockProvider([]), flows=flows).turn(message())


async def test_no_provider() -> None:
    """Speak never raises (deferred); understand raises ProviderError."""
    flows = [{"id": "f", "on": [{"message": []}], "steps": [{"id": "t", "collect": ["nome"]}]}]
    agent = Agent(name="Ana", fields=FIELDS, flows=flows, clock=FakeClock(START))
    result = await agent.turn(message())
    assert [e.reason for e in result.ended] == ["failed"]
    judged = [
        {"id": "v", "on": [{"message": ["comprar"]}], "steps": [{"id": "s", "say": "v"}]},
        {"id": "w", "on": [{"message": ["ajuda"]}], "steps": [{"id": "s", "say": "w"}]},
    ]
    with pytest.raises(ProviderError):
        await Agent(name="Ana", flows=judged, clock=FakeClock(START)).turn(message())


async def test_asking_fixed_question_fields_are_judged_by_understand() -> None:
    """A step with a fixed question has no speak call, so its fields are judged by understand."""
    flows = [
        {
            "id": "f",
            "steps": [
                {"id": "q", "question": "Qual a sua idade?", "collect": ["idade"]},
                {"id": "s", "say": "Anotado: {{idade}}."},
            ],
        }
    ]
    provider = MockProvider([{"fields": {"idade": "41"}}])
    agent = build(provider, flows=flows)
    stored = session(run("r1", "f", "q", "asking"))
    result = await agent.turn(message("41", session=stored))
    assert set(provider.calls[0].json_schema["properties"]) == {"fields"}
    assert result.session.data == {"idade": 41}
    assert [m.text for m in result.messages] == ["Anotado: 41."] and result.llm_calls == 1


async def test_second_talk_step_waits_behind_the_speaker() -> None:
    """One speaker per turn: a second run reaching a talk step waits for the next message."""
    flows = [
        {"id": "a", "steps": [{"id": "q", "question": "Nome?", "collect": ["nome"]}]},
        {
            "id": "b",
            "on": [{"event": "ping"}],
            "steps": [{"id": "q", "question": "Idade?", "collect": ["idade"]}],
        },
        {
            "id": "c",
            "on": [{"event": "ping"}],
            "steps": [{"id": "q", "question": "Plano?", "collect": ["plano"]}],
        },
    ]
    agent = build(MockProvider([]), flows=flows, events={"ping": {}})
    result = await agent.turn({"session_id": "s1", "event": "ping", "key": "e1"})
    assert [m.text for m in result.messages] == ["Idade?"]
    assert {r.flow_id: r.status for r in result.session.runs} == {"b": "asking", "c": "suspended"}
    assert "queued" in [o.code for o in result.outcomes] and result.llm_calls == 0


async def test_unusable_compaction_summary_keeps_the_code_layers() -> None:
    """A failed summary call is counted and the code layers' history is used."""
    history = [{"role": "user", "text": f"E{i:02d} " + "x" * 100} for i in range(20)]
    flows = [{"id": "f", "on": [{"message": []}], "steps": [{"id": "t", "prompt": "p"}]}]
    for failure in (ProviderError("503"), {"summary": None}):
        provider = MockProvider([failure, {"message": "Oi!"}])
        agent = build(provider, flows=flows, compaction={"keep_last": 5, "max_chars": 300})
        result = await agent.turn(message(history=history))
        assert result.llm_calls == 2 and "compaction" not in result.session.metadata
        spoken = "\n".join(m.text for m in provider.calls[1].messages)
        assert "E19" in spoken and "E00" not in spoken


async def test_a_stay_run_reaching_its_end_waits_behind_another_asker() -> None:
    """A run that reaches the end of an onEnd: 'stay' flow goes back to the last talk step it
    took; when another run is asking, it waits suspended behind it."""
    flows = [
        {"id": "a", "steps": [{"id": "q", "collect": ["nome"]}]},
        {
            "id": "b",
            "on_end": "stay",
            "steps": [
                {"id": "t", "prompt": "Tire dúvidas."},
                {"id": "w", "wait": {"ms": 60_000}},
                {"id": "s", "say": "Ainda posso ajudar."},
            ],
        },
    ]
    agent = build(MockProvider([]), flows=flows)
    stored = session(
        run("r1", "a", "q", "asking"),
        run(
            "r2",
            "b",
            "w",
            "waiting",
            last_talk_step_id="t",
            waiting={"key": "r2:w:3", "kind": "timer", "at": START},
        ),
    )
    result = await agent.turn({"session_id": "s1", "wake": "r2:w:3", "session": stored})
    assert [m.text for m in result.messages] == ["Ainda posso ajudar."]
    runs = {r.id: (r.status, r.step_id, r.stay_step_id) for r in result.session.runs}
    assert runs == {"r1": ("asking", "q", None), "r2": ("suspended", "t", "t")}
    assert result.llm_calls == 0


async def test_a_hand_off_child_holds_the_floor_and_speaks() -> None:
    """A child started by then: { flow } joins the queue; the parent's say does not silence the
    child's talk, and the child holds the floor the parent held."""
    flows = [
        {
            "id": "x",
            "on": [{"message": []}],
            "steps": [{"id": "s", "say": "Olá!", "then": {"flow": "y"}}],
        },
        {"id": "y", "steps": [{"id": "t", "collect": ["nome"]}]},
    ]
    provider = MockProvider([{"message": "Como você se chama?", "nome": None}])
    result = await build(provider, flows=flows).turn(message())
    assert [m.text for m in result.messages] == ["Olá!", "Como você se chama?"]
    (child,) = result.session.runs
    assert (child.flow_id, child.status, child.parent_run_id) == ("y", "asking", "r1@s1")
    assert result.llm_calls == 1


async def test_inline_delay_looks_at_the_then_target() -> None:
    """Ten seconds or less, when the next step is a say or a talk step: the next step is the
    wait's then."""
    flows = [
        {
            "id": "f",
            "steps": [
                {"id": "w1", "wait": {"ms": 1000}, "then": "s"},
                {"id": "x", "do": "noop"},
                {"id": "s", "say": "depois", "then": {"step": "w2"}},
                {"id": "w2", "wait": {"ms": 2000}, "then": {"step": "s2", "clear": []}},
                {"id": "s2", "say": "fim", "then": "w3"},
                {"id": "w3", "wait": {"ms": 500}, "then": "end"},
            ],
        }
    ]
    agent = build(MockProvider([]), flows=flows, actions={"noop": lambda ctx: None})
    result = await agent.turn({"session_id": "s1", "start": {"flow": "f", "key": "k"}})
    assert [(m.text, m.after_ms) for m in result.messages] == [("depois", 1000), ("fim", 2000)]
    assert len(result.schedule) == 1 and result.llm_calls == 0


async def test_a_hand_off_after_the_reply_moves_the_child_this_turn() -> None:
    """Nothing pending: the run takes then and keeps moving this turn; a child it hands off to
    moves too, and a talk step it reaches waits for the next message."""
    flows = [
        {
            "id": "x",
            "on": [{"message": []}],
            "steps": [
                {"id": "n", "collect": ["nome"]},
                {"id": "s", "say": "Prazer, {{nome}}!", "then": {"flow": "y"}},
            ],
        },
        {"id": "y", "steps": [{"id": "t", "collect": ["idade"]}]},
    ]
    provider = MockProvider([{"message": "Anotado.", "nome": "Bia"}])
    stored = session(run("r1", "x", "n", "asking"))
    result = await build(provider, flows=flows).turn(message("Bia", session=stored))
    assert [m.text for m in result.messages] == ["Anotado.", "Prazer, Bia!"]
    (child,) = result.session.runs
    assert (child.flow_id, child.step_id, child.status) == ("y", "t", "asking")
    assert result.llm_calls == 1


async def test_the_message_is_not_sent_twice_when_the_history_already_ends_with_it() -> None:
    """messages: history + the turn's message (a host that logs first is not sent it twice)."""
    flows = [{"id": "f", "on": [{"message": []}], "steps": [{"id": "t", "prompt": "p"}]}]
    provider = MockProvider([{"message": "Oi!"}, {"message": "Oi de novo!"}])
    agent = build(provider, flows=flows)
    await agent.turn(message("olá", history=[{"role": "user", "text": "olá"}]))
    await agent.turn(message("olá", history=[{"role": "assistant", "text": "olá"}]))
    first, second = provider.calls
    assert [(m.role, m.text) for m in first.messages] == [("user", "olá")]
    assert [(m.role, m.text) for m in second.messages] == [("assistant", "olá"), ("user", "olá")]


async def test_a_retry_after_hint_longer_than_the_rung_is_respected() -> None:
    """A failure a wait can fix re-parks the talk step: +1m, or later when the server asked."""
    flows = [{"id": "f", "on": [{"message": []}], "steps": [{"id": "t", "collect": ["nome"]}]}]
    slow = MockProvider([ProviderError("429", kind="retryable", retry_after=600)])
    result = await build(slow, flows=flows).turn(message())
    (entry,) = result.schedule
    assert (entry.at - FakeClock(START).now()).total_seconds() == 600
    quick = MockProvider([ProviderError("429", kind="retryable", retry_after=5)])
    (early,) = (await build(quick, flows=flows).turn(message())).schedule
    assert (early.at - FakeClock(START).now()).total_seconds() == 60


@pytest.mark.parametrize(("hint", "waited_s"), [
    (1e12, 86_400), (float("inf"), 86_400), (float("nan"), 60), (-5.0, 60),
])
async def test_a_providers_own_hint_is_bounded_to_a_day(hint: float, waited_s: float) -> None:
    """A provider's own ``ProviderError(retry_after=...)`` may carry any number: past a day it
    is a day (``1e12`` seconds would overflow the date and fail the turn), and NaN or a
    negative hint is no hint (the ladder's first rung)."""
    flows = [{"id": "f", "on": [{"message": []}], "steps": [{"id": "t", "collect": ["nome"]}]}]
    provider = MockProvider([ProviderError("429", kind="retryable", retry_after=hint)])
    (entry,) = (await build(provider, flows=flows).turn(message())).schedule
    assert (entry.at - FakeClock(START).now()).total_seconds() == waited_s
