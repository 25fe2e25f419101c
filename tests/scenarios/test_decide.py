"""Seed 000, phase 4 (Decide): routing at its thresholds, mentions, field writes, branches."""

from __future__ import annotations

from typing import Any

from engine import Agent, FakeClock, MockProvider
from tests.scenarios.support import codes, session_with

FIELDS: dict[str, Any] = {
    "nome": {"type": "string", "ask": "Pergunte o nome."},
    "empresa": {"type": "string", "ask": "Pergunte a empresa."},
    "cidade": {"type": "string", "extract": "anywhere"},
    "idade": {"type": "integer", "extract": "anywhere"},
    "valor": {"type": "number", "extract": "anywhere"},
    "ativo": {"type": "boolean", "extract": "anywhere"},
    "plano": {"type": "string", "enum": ["basic", "pro"], "extract": "anywhere"},
}


def build(provider: MockProvider, **config: Any) -> Agent:
    config.setdefault("fields", FIELDS)
    return Agent(name="Ana", provider=provider, clock=FakeClock("2026-01-05T09:00:00Z"), **config)


def message(text: str = "oi", msg_id: str = "m1", **extra: Any) -> dict[str, Any]:
    return {"session_id": "s1", "message": text, "id": msg_id, **extra}


def say(step_id: str, text: str, then: str | None = None) -> dict[str, Any]:
    step: dict[str, Any] = {"id": step_id, "say": text}
    if then is not None:
        step["then"] = then
    return step


def phrase_flow(flow_id: str, phrases: list[str], steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": flow_id, "on": [{"message": phrases}], "steps": steps}


def started(result: Any) -> list[str]:
    return [s.flow_id for s in result.started]


def runs_by_flow(result: Any) -> dict[str, Any]:
    return {run.flow_id: run for run in result.session.runs}


# --- routing, no asker -------------------------------------------------------------------------

TWO_FLOWS = [
    phrase_flow("vendas", ["quero comprar"], [say("a", "Planos!")]),
    phrase_flow("suporte", ["problema"], [say("b", "Suporte!")]),
]


async def test_score_39_starts_nothing() -> None:
    """With no asker: the best score at 40 or above starts, else the first message: [] catch-all, else nobody."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider([{"flows": {"vendas": 39, "suporte": 0}}])
    result = await build(provider, idle="silent", flows=TWO_FLOWS).turn(message("quero"))
    assert result.llm_calls == 1
    assert started(result) == []
    assert result.messages == []


async def test_score_40_starts_the_flow() -> None:
    """With no asker: the best score at 40 or above starts."""
    provider = MockProvider([{"flows": {"vendas": 40, "suporte": 0}}])
    result = await build(provider, idle="silent", flows=TWO_FLOWS).turn(message("quero"))
    assert result.llm_calls == 1
    assert started(result) == ["vendas"]
    assert [m.text for m in result.messages] == ["Planos!"]


async def test_best_score_wins() -> None:
    """With no asker: the best score at 40 or above starts."""
    provider = MockProvider([{"flows": {"vendas": 60, "suporte": 75}}])
    result = await build(provider, idle="silent", flows=TWO_FLOWS).turn(message("quero"))
    assert started(result) == ["suporte"]


async def test_low_scores_fall_back_to_the_first_catch_all() -> None:
    """With no asker: the best score at 40 or above starts, else the first message: [] catch-all."""
    provider = MockProvider([{"flows": {"vendas": 39, "suporte": 12}}])
    flows = [
        *TWO_FLOWS,
        phrase_flow("geral", [], [say("c", "Olá, sou a Ana.")]),
        phrase_flow("outro", [], [say("d", "Outro catch-all.")]),
    ]
    result = await build(provider, idle="silent", flows=flows).turn(message("bom dia"))
    assert result.llm_calls == 1
    assert started(result) == ["geral"]
    assert [m.text for m in result.messages] == ["Olá, sou a Ana."]


# --- routing with an asker ---------------------------------------------------------------------

ASKER_FLOWS = [
    phrase_flow("cadastro", ["quero me cadastrar"], [{"id": "nome", "collect": ["nome"]}]),
    phrase_flow("suporte", ["problema"], [{"id": "empresa", "collect": ["empresa"]}]),
]


async def asking_session(script: list[Any]) -> tuple[MockProvider, Any]:
    """A session where `cadastro` asks for the name, plus the provider scripted for turn two."""
    provider = MockProvider([{"message": "Qual o seu nome?", "nome": None}, *script])
    agent = build(provider, flows=ASKER_FLOWS, idle="silent")
    first = await agent.turn({"session_id": "s1", "start": {"flow": "cadastro", "key": "k0"}})
    assert [(r.flow_id, r.status) for r in first.session.runs] == [("cadastro", "asking")]
    return provider, (agent, first.session)


async def test_takeover_needs_fifteen_points_over_the_asker() -> None:
    """With an asking run, another flow takes over only when its score is at least 40 and beats the asker's by at least 15."""  # noqa: E501  # the seed sentence, quoted whole
    provider, (agent, session) = await asking_session(
        [{"flows": {"cadastro": 50, "suporte": 64}}, {"message": "E o seu nome?", "nome": None}]
    )
    result = await agent.turn(message("tenho um problema", "m2", session=session))
    assert result.llm_calls == 2
    assert started(result) == []
    assert set(provider.calls[-1].json_schema["properties"]) == {"message", "nome"}
    assert [(r.flow_id, r.status) for r in result.session.runs] == [("cadastro", "asking")]


async def test_takeover_at_fifteen_points_over_the_asker() -> None:
    """With an asking run, another flow takes over only when its score is at least 40 and beats the asker's by at least 15."""  # noqa: E501  # the seed sentence, quoted whole
    _provider, (agent, session) = await asking_session(
        [
            {"flows": {"cadastro": 50, "suporte": 65}},
            {"message": "Qual a empresa?", "empresa": None},
        ]
    )
    result = await agent.turn(message("tenho um problema", "m2", session=session))
    assert result.llm_calls == 2
    assert started(result) == ["suporte"]
    runs = runs_by_flow(result)
    assert runs["suporte"].status == "asking"
    assert runs["cadastro"].status == "suspended"


async def test_takeover_below_40_does_not_happen() -> None:
    """Another flow takes over only when its score is at least 40."""
    _provider, (agent, session) = await asking_session(
        [{"flows": {"cadastro": 0, "suporte": 39}}, {"message": "E o seu nome?", "nome": None}]
    )
    result = await agent.turn(message("tenho um problema", "m2", session=session))
    assert started(result) == []
    assert [(r.flow_id, r.status) for r in result.session.runs] == [("cadastro", "asking")]


async def test_takeover_at_40_over_a_zero_asker() -> None:
    """Another flow takes over only when its score is at least 40 and beats the asker's by at least 15."""  # noqa: E501  # the seed sentence, quoted whole
    _provider, (agent, session) = await asking_session(
        [{"flows": {"cadastro": 0, "suporte": 40}}, {"message": "Qual a empresa?", "empresa": None}]
    )
    result = await agent.turn(message("tenho um problema", "m2", session=session))
    assert started(result) == ["suporte"]
    assert runs_by_flow(result)["suporte"].status == "asking"


async def test_a_suspended_run_of_the_chosen_flow_resumes() -> None:
    """A suspended run of the chosen flow resumes instead of a new one starting."""
    _provider, (agent, session) = await asking_session(
        [
            {"flows": {"cadastro": 0, "suporte": 90}},
            {"message": "Qual a empresa?", "empresa": None},
            {"flows": {"cadastro": 90, "suporte": 0}},
            {"message": "Voltando: qual o seu nome?", "nome": None},
        ]
    )
    original = session.runs[0].id
    second = await agent.turn(message("tenho um problema", "m2", session=session))
    assert runs_by_flow(second)["cadastro"].status == "suspended"
    third = await agent.turn(message("quero me cadastrar", "m3", session=second.session))
    assert third.llm_calls == 2
    assert started(third) == []
    runs = runs_by_flow(third)
    assert runs["cadastro"].id == original
    assert runs["cadastro"].status == "asking"
    assert runs["suporte"].status == "suspended"
    assert [m.text for m in third.messages] == ["Voltando: qual o seu nome?"]


# --- mentions ----------------------------------------------------------------------------------


async def test_mention_runs_start_in_flow_order_with_extract_as_input() -> None:
    """Mention runs start in flow order. A trigger's extract values become the run's input."""
    provider = MockProvider(
        [
            {
                "mentions": {"prazo": True, "preco": True},
                "extract": {"preco": {"item": "pro"}},
            }
        ]
    )
    agent = build(
        provider,
        idle="silent",
        flows=[
            {
                "id": "preco",
                "on": [{"mention": ["preço"], "extract": {"item": {"type": "string"}}}],
                "steps": [say("p", "O plano {{input.item}} custa 10.")],
            },
            {
                "id": "prazo",
                "on": [{"mention": ["prazo"]}],
                "steps": [say("z", "Entrega em 2 dias.")],
            },
        ],
    )
    result = await agent.turn(message("qual o preço do pro e o prazo?"))
    assert result.llm_calls == 1
    assert started(result) == ["preco", "prazo"]
    assert [m.text for m in result.messages] == ["O plano pro custa 10.", "Entrega em 2 dias."]


async def test_empty_mention_is_a_code_only_detector() -> None:
    """A mention: [] trigger is a code-only detector: it goes through the start checks on every message without the call, so a blocked repeat is logged as a skip."""  # noqa: E501  # the seed sentence, quoted whole
    seen: list[str] = []
    provider = MockProvider([])
    agent = build(
        provider,
        idle="silent",
        actions={"log": lambda ctx: seen.append(ctx.key) or {"ok": True}},
        flows=[
            {
                "id": "detector",
                "on": [{"mention": []}],
                "repeat": "once",
                "steps": [{"id": "registra", "do": "log"}],
            }
        ],
    )
    first = await agent.turn(message("oi"))
    assert first.llm_calls == 0
    assert started(first) == ["detector"]
    second = await agent.turn(message("de novo", "m2", session=first.session))
    assert second.llm_calls == 0
    assert started(second) == []
    assert [s.flow_id for s in second.skipped] == ["detector"]
    assert len(seen) == 1


# --- start, clear_on_start, field writes -------------------------------------------------------

FIELD_FLOWS = [
    {
        "id": "perfil",
        "on": [{"message": ["meu perfil"]}],
        "clear_on_start": ["cidade"],
        "steps": [
            {
                "id": "dados",
                "question": "Me conta mais?",
                "collect": ["cidade", "idade", "valor", "ativo", "plano"],
            }
        ],
    },
    phrase_flow("suporte", ["problema"], [say("b", "Suporte!")]),
]


async def write_fields(fields: dict[str, Any], data: dict[str, Any] | None = None) -> Any:
    provider = MockProvider([{"flows": {"perfil": 90, "suporte": 0}, "fields": fields}])
    agent = build(provider, idle="silent", flows=FIELD_FLOWS)
    session = None if data is None else session_with(data)
    result = await agent.turn(message("meu perfil", session=session))
    assert result.llm_calls == 1
    return result


async def test_strings_are_coerced_to_numbers_and_booleans() -> None:
    """Strings are coerced to numbers and booleans on the way in."""
    result = await write_fields(
        {"idade": "42", "valor": "12.5", "ativo": "true", "cidade": "Recife"}
    )
    data = result.session.data
    assert data["idade"] == 42 and isinstance(data["idade"], int)
    assert data["valor"] == 12.5
    assert data["ativo"] is True
    assert data["cidade"] == "Recife"


async def test_unknown_field_is_dropped() -> None:
    """An unknown field name is dropped (code: 'unknown-field')."""
    result = await write_fields({"cidade": "Recife", "sobrenome": "Silva"})
    assert "sobrenome" not in result.session.data
    assert result.session.data["cidade"] == "Recife"
    assert "unknown-field" in codes(result)


async def test_value_that_does_not_fit_the_type_is_dropped() -> None:
    """A value that does not fit the type is dropped (code: 'bad-value')."""
    result = await write_fields({"idade": "quarenta", "cidade": "Recife"})
    assert "idade" not in result.session.data
    assert result.session.data["cidade"] == "Recife"
    assert "bad-value" in codes(result)


async def test_value_outside_enum_is_dropped() -> None:
    """A value outside enum is dropped (code: 'not-in-enum')."""
    result = await write_fields({"plano": "gold"})
    assert "plano" not in result.session.data
    assert "not-in-enum" in codes(result)
    accepted = await write_fields({"plano": "pro"})
    assert accepted.session.data["plano"] == "pro"


async def test_clear_on_start_runs_before_extracted_values_land() -> None:
    """A run that starts applies clearOnStart now, before extracted values land."""
    cleared = await write_fields({"idade": 30}, data={"cidade": "Olinda"})
    assert "cidade" not in cleared.session.data
    assert cleared.session.data["idade"] == 30
    kept = await write_fields({"idade": 30, "cidade": "Recife"}, data={"cidade": "Olinda"})
    assert kept.session.data["cidade"] == "Recife"


# --- branches ----------------------------------------------------------------------------------


async def test_first_true_if_branch_of_the_asker_is_taken() -> None:
    """The first true branch of the asking step takes its then (code: 'branch'): if branches by code."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider(
        [
            {"message": "Qual o seu nome?", "nome": None},
            {"fields": {"plano": "pro"}},
        ]
    )
    agent = build(
        provider,
        flows=[
            phrase_flow(
                "cadastro",
                [],
                [
                    {
                        "id": "nome",
                        "collect": ["nome"],
                        "branches": [
                            {"if": {"equals": {"plano": "pro"}}, "then": "pro"},
                            {"if": {"known": "plano"}, "then": "outro"},
                        ],
                    },
                    {"id": "plano", "collect": ["plano"]},
                    say("pro", "Plano pro, ótimo!", then="end"),
                    say("outro", "Outro plano.", then="end"),
                ],
            )
        ],
    )
    first = await agent.turn({"session_id": "s1", "start": {"flow": "cadastro", "key": "k0"}})
    assert first.llm_calls == 1
    second = await agent.turn(message("quero o pro", "m2", session=first.session))
    assert second.llm_calls == 1
    assert "branch" in codes(second)
    assert [m.text for m in second.messages] == ["Plano pro, ótimo!"]


async def test_mention_runs_start_before_the_routed_run() -> None:
    """Mention runs start in flow order; then the routed run starts or resumes and holds the floor."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider([{"flows": {"vendas": 90, "suporte": 0}, "mentions": {"preco": True}}])
    agent = build(
        provider,
        idle="silent",
        flows=[
            *TWO_FLOWS,
            {"id": "preco", "on": [{"mention": ["preço"]}], "steps": [say("p", "Custa 10.")]},
        ],
    )
    result = await agent.turn(message("quero comprar, qual o preço?"))
    assert result.llm_calls == 1
    assert started(result) == ["preco", "vendas"]
