"""Seed 000, "The budget": what each kind of turn spends in model calls.

Every scenario scripts its ``MockProvider`` with exactly the calls the seed allows, so a turn
that spends one call too many raises ``MockExhausted`` and fails loudly.
"""

from __future__ import annotations

from typing import Any

from engine import Agent, FakeClock, MockProvider, ModelResponse

FIELDS: dict[str, Any] = {"nome": {"type": "string", "ask": "Pergunte o nome da pessoa."}}
WELCOME = {
    "id": "boas-vindas",
    "name": "Boas-vindas",
    "on": [{"message": []}],
    "steps": [{"id": "nome", "collect": ["nome"]}],
}


def build(provider: MockProvider, **config: Any) -> Agent:
    config.setdefault("fields", FIELDS)
    return Agent(name="Ana", provider=provider, clock=FakeClock("2026-01-05T09:00:00Z"), **config)


def phrase_flow(flow_id: str, phrases: list[str], steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": flow_id, "on": [{"message": phrases}], "steps": steps}


def say(step_id: str, text: str) -> dict[str, Any]:
    return {"id": step_id, "say": text}


def message(text: str = "oi", msg_id: str = "m1", **extra: Any) -> dict[str, Any]:
    return {"session_id": "s1", "message": text, "id": msg_id, **extra}


def started(result: Any) -> list[str]:
    return [s.flow_id for s in result.started]


def kinds(provider: MockProvider) -> list[str]:
    return [c.schema_name for c in provider.calls]


async def test_flow_without_talk_steps_costs_nothing() -> None:
    """A flow with no talk steps costs zero model calls."""
    provider = MockProvider([])
    agent = build(
        provider,
        actions={"notify": lambda ctx: {"ok": True}},
        flows=[
            {
                "id": "aviso",
                "on": [{"message": []}],
                "steps": [say("ola", "Olá!"), {"id": "avisa", "do": "notify"}],
            }
        ],
    )
    result = await agent.turn(message())
    assert result.llm_calls == 0
    assert provider.calls == []
    assert [m.text for m in result.messages] == ["Olá!"]


async def test_one_flow_one_collect_step_costs_one_speak_call() -> None:
    """console.log(r.llmCalls); // 1: one flow, nothing to judge, one speak call."""
    provider = MockProvider([{"message": "Oi! Como posso te chamar?", "nome": None}])
    agent = build(provider, flows=[WELCOME])
    result = await agent.turn(message())
    assert result.llm_calls == 1
    assert kinds(provider) == ["speak"]
    assert [(m.kind, m.text) for m in result.messages] == [("ai", "Oi! Como posso te chamar?")]
    talk_lines = [o for o in result.outcomes if o.step_id == "nome" and o.llm_calls]
    assert [o.llm_calls for o in talk_lines] == [1]


async def test_understand_plus_speak_costs_two_calls() -> None:
    """The model gets at most two calls per turn, and each has one job."""
    provider = MockProvider(
        [
            {"flows": {"vendas": 85, "suporte": 5}},
            {"message": "Claro! Qual o seu nome?", "nome": None},
        ]
    )
    agent = build(
        provider,
        flows=[
            phrase_flow("vendas", ["quero comprar"], [{"id": "nome", "collect": ["nome"]}]),
            phrase_flow("suporte", ["estou com problema"], [{"id": "ajuda", "prompt": "Ajude"}]),
        ],
    )
    result = await agent.turn(message("quero comprar um plano"))
    assert result.llm_calls == 2
    assert kinds(provider) == ["understand", "speak"]
    assert started(result) == ["vendas"]


async def test_nothing_to_judge_the_idle_speaker_answers_with_one_call() -> None:
    """Nothing to judge: no call. The catch-all or the idle speaker answers."""
    provider = MockProvider([{"message": "Olá! Em que posso ajudar?"}])
    agent = build(
        provider,
        idle="Responda com simpatia e ofereça ajuda.",
        events={"pago": {}},
        flows=[{"id": "pagamento", "on": [{"event": "pago"}], "steps": [say("ok", "Recebido")]}],
    )
    result = await agent.turn(message())
    assert result.llm_calls == 1
    assert kinds(provider) == ["speak"]
    assert [(m.kind, m.text) for m in result.messages] == [("ai", "Olá! Em que posso ajudar?")]


async def test_silent_idle_with_nothing_to_judge_costs_nothing() -> None:
    """Idle: 'silent' mutes it."""
    provider = MockProvider([])
    agent = build(
        provider,
        idle="silent",
        events={"pago": {}},
        flows=[{"id": "pagamento", "on": [{"event": "pago"}], "steps": [say("ok", "Recebido")]}],
    )
    result = await agent.turn(message())
    assert result.llm_calls == 0
    assert result.messages == []


async def test_lone_flow_with_silent_idle_starts_without_scoring() -> None:
    """Exactly one eligible message flow, nobody on the floor, no catch-all that passes, idle: 'silent', nothing else to judge: it starts without scoring."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider([])
    agent = build(
        provider,
        idle="silent",
        flows=[phrase_flow("vendas", ["quero comprar"], [say("oferta", "Temos planos!")])],
    )
    result = await agent.turn(message("bom dia"))
    assert result.llm_calls == 0
    assert started(result) == ["vendas"]
    assert [m.text for m in result.messages] == ["Temos planos!"]


async def test_lone_flow_is_scored_when_the_idle_speaker_is_there() -> None:
    """With a catch-all or the idle speaker there, a low score has somewhere to go, so the lone flow is scored."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider([{"flows": {"vendas": 90}}])
    agent = build(
        provider, flows=[phrase_flow("vendas", ["quero comprar"], [say("oferta", "Temos planos!")])]
    )
    result = await agent.turn(message("quero comprar"))
    assert result.llm_calls == 1
    assert kinds(provider) == ["understand"]
    assert started(result) == ["vendas"]


async def test_lone_flow_is_scored_when_a_catch_all_is_there() -> None:
    """With a catch-all or the idle speaker there, a low score has somewhere to go, so the lone flow is scored."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider([{"flows": {"vendas": 10}}])
    agent = build(
        provider,
        idle="silent",
        flows=[
            phrase_flow("vendas", ["quero comprar"], [say("oferta", "Temos planos!")]),
            phrase_flow("geral", [], [say("geral", "Olá, sou a Ana.")]),
        ],
    )
    result = await agent.turn(message("bom dia"))
    assert result.llm_calls == 1
    assert kinds(provider) == ["understand"]
    assert started(result) == ["geral"]
    assert [m.text for m in result.messages] == ["Olá, sou a Ana."]


async def test_floor_holder_alone_costs_only_its_speak_call() -> None:
    """A floor holder, no other candidate, nothing else to judge: there is nothing to compare."""
    provider = MockProvider(
        [
            {"message": "Como posso te chamar?", "nome": None},
            {"message": "Prazer, Maria!", "nome": "Maria"},
        ]
    )
    agent = build(provider, flows=[WELCOME])
    first = await agent.turn(message())
    assert first.llm_calls == 1
    second = await agent.turn(message("Maria", "m2", session=first.session))
    assert second.llm_calls == 1
    assert kinds(provider) == ["speak", "speak"]
    assert second.session.data["nome"] == "Maria"


async def test_silenced_turn_costs_nothing() -> None:
    """It is skipped under silenced unless you passed { reason, understand: true }."""
    provider = MockProvider([])
    agent = build(
        provider,
        flows=[
            phrase_flow("vendas", ["quero comprar"], [{"id": "nome", "collect": ["nome"]}]),
            phrase_flow("suporte", ["problema"], [{"id": "ajuda", "prompt": "Ajude"}]),
        ],
    )
    result = await agent.turn(message("quero comprar", silenced={"reason": "humano"}))
    assert result.llm_calls == 0
    assert result.messages == []


async def test_silenced_with_understand_costs_only_the_understand_call() -> None:
    """Under silenced nobody speaks and no call is made (understand runs only when asked for)."""
    provider = MockProvider([{"flows": {"vendas": 90, "suporte": 0}}])
    agent = build(
        provider,
        flows=[
            phrase_flow("vendas", ["quero comprar"], [{"id": "nome", "collect": ["nome"]}]),
            phrase_flow("suporte", ["problema"], [{"id": "ajuda", "prompt": "Ajude"}]),
        ],
    )
    result = await agent.turn(
        message("quero comprar", silenced={"reason": "humano", "understand": True})
    )
    assert result.llm_calls == 1
    assert kinds(provider) == ["understand"]
    assert result.messages == []
    assert [(o.code, o.detail) for o in result.outcomes if o.code == "silenced"] == [
        ("silenced", "humano")
    ]


def long_history(entries: int, size: int) -> list[dict[str, str]]:
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "text": f"{i:03d} " + "x" * size} for i in range(entries)]


async def test_compaction_over_the_limit_adds_exactly_one_compact_call() -> None:
    """Only the last layer (auto_compact, a written summary) calls the model, and it counts as one call in llmCalls."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider(
        [
            ModelResponse(text="Resumo: a pessoa quer um plano.", json={"summary": "Resumo."}),
            {"message": "Como posso te chamar?", "nome": None},
        ]
    )
    agent = build(
        provider,
        flows=[WELCOME],
        compaction={"keep_last": 10, "max_chars": 500, "summarize": True},
    )
    result = await agent.turn(message(history=long_history(30, 100)))
    assert result.llm_calls == 2
    assert kinds(provider) == ["compact", "speak"]


async def test_compaction_under_the_limit_costs_nothing() -> None:
    """Only when still over max_chars and summarize is set, one "compact" call writes a summary."""
    provider = MockProvider([{"message": "Como posso te chamar?", "nome": None}])
    agent = build(
        provider,
        flows=[WELCOME],
        compaction={"keep_last": 40, "max_chars": 24000, "summarize": True},
    )
    result = await agent.turn(message(history=long_history(6, 20)))
    assert result.llm_calls == 1
    assert kinds(provider) == ["speak"]


async def test_compaction_without_summarize_never_calls_the_model() -> None:
    """Only when still over max_chars and summarize is set, one "compact" call writes a summary."""
    provider = MockProvider([{"message": "Como posso te chamar?", "nome": None}])
    agent = build(
        provider,
        flows=[WELCOME],
        compaction={"keep_last": 10, "max_chars": 500, "summarize": False},
    )
    result = await agent.turn(message(history=long_history(30, 100)))
    assert result.llm_calls == 1
    assert kinds(provider) == ["speak"]


async def test_a_catch_all_whose_if_fails_does_not_make_the_lone_flow_scored() -> None:
    """Exactly one eligible message flow, nobody on the floor, no catch-all that passes, idle: 'silent', nothing else to judge: it starts without scoring."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider([])
    agent = build(
        provider,
        idle="silent",
        flows=[
            phrase_flow("vendas", ["quero comprar"], [say("oferta", "Temos planos!")]),
            {
                "id": "geral",
                "on": [{"message": [], "if": {"known": "nome"}}],
                "steps": [say("geral", "Olá de novo!")],
            },
        ],
    )
    result = await agent.turn(message("bom dia"))
    assert result.llm_calls == 0
    assert started(result) == ["vendas"]
