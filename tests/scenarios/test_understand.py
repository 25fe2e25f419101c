"""Seed 000, phase 3 (Understand): what there is to judge, the envelope, and its failures."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from engine import Agent, FakeClock, MockProvider, ModelResponse, ProviderError

FIELDS: dict[str, Any] = {
    "nome": {"type": "string", "ask": "Pergunte o nome."},
    "empresa": {"type": "string", "ask": "Pergunte a empresa.", "extract": "anywhere"},
    "confirmado": {"type": "boolean", "ask": "Confirme."},
}


def build(provider: MockProvider, **config: Any) -> Agent:
    config.setdefault("fields", FIELDS)
    return Agent(name="Ana", provider=provider, clock=FakeClock("2026-01-05T09:00:00Z"), **config)


def message(text: str = "oi", msg_id: str = "m1", **extra: Any) -> dict[str, Any]:
    return {"session_id": "s1", "message": text, "id": msg_id, **extra}


def say(step_id: str, text: str) -> dict[str, Any]:
    return {"id": step_id, "say": text}


def phrase_flow(flow_id: str, phrases: list[str], steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": flow_id, "on": [{"message": phrases}], "steps": steps}


def accepts_null(schema: dict[str, Any]) -> bool:
    return Draft202012Validator(schema).is_valid(None)


def object_parts(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The object-typed parts of a schema, looking through anyOf/oneOf nullable wrappers."""
    parts = [schema] if "properties" in schema else []
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key, []):
            parts.extend(object_parts(branch))
    return parts


def assert_required_and_nullable(envelope: dict[str, Any]) -> None:
    """Every section is required; inside a section every property is required and nullable."""
    assert set(envelope["required"]) == set(envelope["properties"])
    pending = [section for s in envelope["properties"].values() for section in object_parts(s)]
    assert pending, "the envelope has no sections"
    while pending:
        obj = pending.pop()
        properties = obj["properties"]
        assert set(obj.get("required", [])) == set(properties), obj
        for name, prop in properties.items():
            assert accepts_null(prop), f"{name} is not nullable: {prop}"
            pending.extend(object_parts(prop))


def section_properties(envelope: dict[str, Any], section: str) -> set[str]:
    return {
        name
        for part in object_parts(envelope["properties"][section])
        for name in part["properties"]
    }


async def test_only_sections_with_something_to_judge_are_present() -> None:
    """Only the sections with something to judge are present."""
    provider = MockProvider([{"flows": {"vendas": 90, "suporte": 0}}])
    agent = build(
        provider,
        idle="silent",
        flows=[
            phrase_flow("vendas", ["quero comprar"], [say("a", "Planos!")]),
            phrase_flow("suporte", ["problema"], [say("b", "Suporte!")]),
        ],
    )
    result = await agent.turn(message("quero comprar"))
    assert result.llm_calls == 1
    (call,) = provider.calls
    assert call.schema_name == "understand"
    assert set(call.json_schema["properties"]) == {"flows"}
    assert section_properties(call.json_schema, "flows") == {"vendas", "suporte"}
    assert_required_and_nullable(call.json_schema)


async def test_every_section_is_present_when_each_has_something_to_judge() -> None:
    """One envelope: { flows, mentions, extract, branches, fields }, every property required and nullable."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider(
        [
            {"message": "Quer agendar?", "confirmado": None},
            {
                "flows": {"cadastro": 50, "vendas": 0},
                "mentions": {"preco": False},
                "extract": {"preco": {"plano": None}},
                "branches": {"q1": None, "q2": None},
                "fields": {"empresa": None},
            },
            {"message": "Pode confirmar?", "confirmado": None},
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
                        "id": "pergunta",
                        "collect": ["confirmado"],
                        "branches": [
                            {"when": "a pessoa quer agendar?", "then": "agendar"},
                            {"when": "a pessoa quer um humano?", "then": "humano"},
                        ],
                    },
                    {"id": "empresa", "collect": ["empresa"]},
                    say("agendar", "Agendado."),
                    say("humano", "Chamando alguém."),
                ],
            ),
            phrase_flow("vendas", ["quero comprar"], [say("v", "Planos!")]),
            {
                "id": "preco",
                "on": [{"mention": ["preço"], "extract": {"plano": {"type": "string"}}}],
                "steps": [say("p", "Custa 10.")],
            },
        ],
    )
    first = await agent.turn({"session_id": "s1", "start": {"flow": "cadastro", "key": "k0"}})
    assert [c.schema_name for c in provider.calls] == ["speak"]
    second = await agent.turn(message("hmm", "m2", session=first.session))
    assert second.llm_calls == 2
    understand = provider.calls[1]
    assert understand.schema_name == "understand"
    envelope = understand.json_schema
    assert set(envelope["properties"]) >= {"mentions", "extract", "branches", "fields"}
    assert section_properties(envelope, "mentions") == {"preco"}
    assert section_properties(envelope, "branches") == {"q1", "q2"}
    assert section_properties(envelope, "fields") == {"empresa"}
    assert section_properties(envelope, "extract") == {"preco"}
    assert_required_and_nullable(envelope)


async def test_branch_aliases_are_mapped_back_to_the_asking_step() -> None:
    """Branch keys travel as short aliases (q1, q2) because a run id is not a legal property name; they are mapped back when the reply is parsed."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider(
        [
            {"message": "Quer agendar ou falar com alguém?", "confirmado": None},
            {"branches": {"q1": False, "q2": True, "q3": True}},
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
                        "id": "pergunta",
                        "collect": ["confirmado"],
                        "branches": [
                            {"when": "a pessoa quer agendar?", "then": "agendar"},
                            {"when": "a pessoa quer um humano?", "then": "humano"},
                            {"when": "a pessoa quer cancelar?", "then": "cancelar"},
                        ],
                    },
                    {**say("agendar", "Agendado."), "then": "end"},
                    {**say("humano", "Chamando alguém."), "then": "end"},
                    {**say("cancelar", "Cancelado."), "then": "end"},
                ],
            )
        ],
    )
    first = await agent.turn(message("oi"))
    second = await agent.turn(message("quero falar com alguém", "m2", session=first.session))
    assert second.llm_calls == 1
    assert section_properties(provider.calls[1].json_schema, "branches") == {"q1", "q2", "q3"}
    assert "branch" in [o.code for o in second.outcomes]
    assert [m.text for m in second.messages] == ["Chamando alguém."]


async def test_reply_without_json_is_an_empty_judgement_and_still_counts() -> None:
    """A reply with no usable JSON is logged and treated as an empty judgement; the call still counts."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider([ModelResponse(text="desculpe, não sei responder")])
    agent = build(
        provider,
        flows=[
            phrase_flow("vendas", ["quero comprar"], [say("a", "Planos!")]),
            phrase_flow("suporte", ["problema"], [say("b", "Suporte!")]),
            phrase_flow("geral", [], [say("c", "Olá, sou a Ana.")]),
        ],
    )
    result = await agent.turn(message("quero comprar"))
    assert result.llm_calls == 1
    assert [s.flow_id for s in result.started] == ["geral"]
    assert [m.text for m in result.messages] == ["Olá, sou a Ana."]


async def test_understand_failure_raises_and_changes_nothing() -> None:
    """A provider failure here throws ProviderError: nothing ran, nothing was saved, and the host retries the input."""  # noqa: E501  # the seed sentence, quoted whole
    ran: list[str] = []
    flows = [
        phrase_flow("vendas", ["quero comprar"], [{"id": "a", "do": "notify"}]),
        phrase_flow("suporte", ["problema"], [{"id": "b", "do": "notify"}]),
    ]
    actions = {"notify": lambda ctx: ran.append(ctx.key) or {"ok": True}}
    failing = MockProvider([ProviderError("upstream 503", kind="retryable")])
    agent = build(failing, flows=flows, actions=actions, idle="silent")
    session = {
        "id": "s1",
        "v": 4,
        "version": 3,
        "data": {"nome": "Maria"},
        "runs": [],
        "claims": {},
        "inputs": [],
        "metadata": {},
    }
    request = message("quero comprar", session=session)
    before = repr(request)
    with pytest.raises(ProviderError):
        await agent.turn(request)
    assert ran == []
    assert repr(request) == before

    retry = MockProvider([{"flows": {"vendas": 90, "suporte": 0}}])
    agent = build(retry, flows=flows, actions=actions, idle="silent")
    result = await agent.turn(request)
    assert "duplicate-input" not in [o.code for o in result.outcomes]
    assert [s.flow_id for s in result.started] == ["vendas"]
    assert len(ran) == 1


async def test_candidates_exclude_flows_whose_if_fails() -> None:
    """Candidates: every message flow with a non-empty phrase list whose if holds and whose repeat allows a start."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider([])
    agent = build(
        provider,
        idle="silent",
        flows=[
            {
                "id": "vip",
                "on": [{"message": ["atendimento vip"], "if": {"known": "empresa"}}],
                "steps": [say("a", "VIP!")],
            },
            phrase_flow("vendas", ["quero comprar"], [say("b", "Planos!")]),
        ],
    )
    result = await agent.turn(message("quero comprar"))
    # vip's `if` fails, so vendas is the lone eligible flow and starts without scoring.
    assert result.llm_calls == 0
    assert [s.flow_id for s in result.started] == ["vendas"]


async def test_candidates_exclude_flows_whose_repeat_blocks_a_start() -> None:
    """Candidates: every message flow with a non-empty phrase list whose if holds and whose repeat allows a start."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider([{"flows": {"vendas": 90, "promo": 0}}])
    agent = build(
        provider,
        idle="silent",
        flows=[
            {**phrase_flow("promo", ["promoção"], [say("a", "Promo!")]), "repeat": "once"},
            phrase_flow("vendas", ["quero comprar"], [say("b", "Planos!")]),
        ],
    )
    first = await agent.turn(message("quero comprar"))
    assert first.llm_calls == 1
    start = {"session_id": "s1", "start": {"flow": "promo", "key": "k1"}, "session": first.session}
    second = await agent.turn(start)
    assert [s.flow_id for s in second.started] == ["promo"]
    third = await agent.turn(message("quero comprar", "m3", session=second.session))
    # promo already ran once, so vendas is alone and starts without a call.
    assert third.llm_calls == 0
    assert [s.flow_id for s in third.started] == ["vendas"]
    assert len(provider.calls) == 1


async def test_catch_all_first_step_fields_are_not_worth_a_call() -> None:
    """The fields its first step asks are read by that step's own speak call, so on their own they are not worth a call."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider([{"message": "Qual a sua empresa?", "empresa": None}])
    agent = build(provider, flows=[phrase_flow("geral", [], [{"id": "e", "collect": ["empresa"]}])])
    result = await agent.turn(message("oi, sou da ACME"))
    assert result.llm_calls == 1
    assert [c.schema_name for c in provider.calls] == ["speak"]


async def test_catch_all_later_step_fields_are_judged() -> None:
    """With nobody on the floor, the catch-all that would take the message adds its fields too, because an opening message often says the most."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider(
        [{"fields": {"empresa": "ACME"}}, {"message": "Como posso te chamar?", "nome": None}]
    )
    agent = build(
        provider,
        flows=[
            phrase_flow(
                "geral",
                [],
                [{"id": "n", "collect": ["nome"]}, {"id": "e", "collect": ["empresa"]}],
            )
        ],
    )
    result = await agent.turn(message("oi, sou da ACME"))
    assert result.llm_calls == 2
    assert [c.schema_name for c in provider.calls] == ["understand", "speak"]
    assert set(provider.calls[0].json_schema["properties"]) == {"fields"}
    assert section_properties(provider.calls[0].json_schema, "fields") == {"empresa"}
    assert result.session.data["empresa"] == "ACME"


async def test_catch_all_fixed_question_fields_do_count() -> None:
    """A first step with a fixed question has no speak call, so its fields do count."""
    provider = MockProvider([{"fields": {"empresa": None}}])
    agent = build(
        provider,
        flows=[
            phrase_flow(
                "geral", [], [{"id": "e", "question": "De qual empresa?", "collect": ["empresa"]}]
            )
        ],
    )
    result = await agent.turn(message("oi"))
    assert result.llm_calls == 1
    assert [c.schema_name for c in provider.calls] == ["understand"]
    assert [(m.kind, m.text) for m in result.messages] == [("verbatim", "De qual empresa?")]


async def test_mentions_exclude_flows_whose_repeat_blocks_a_start() -> None:
    """Mentions: every mention flow with a non-empty list whose repeat allows a start."""
    provider = MockProvider(
        [{"mentions": {"promo": True, "preco": False}}, {"mentions": {"preco": True}}]
    )
    agent = build(
        provider,
        idle="silent",
        flows=[
            {
                "id": "promo",
                "on": [{"mention": ["promoção"]}],
                "repeat": "once",
                "steps": [say("a", "Temos promoção!")],
            },
            {"id": "preco", "on": [{"mention": ["preço"]}], "steps": [say("b", "Custa 10.")]},
        ],
    )
    first = await agent.turn(message("tem promoção?"))
    assert section_properties(provider.calls[0].json_schema, "mentions") == {"promo", "preco"}
    assert [s.flow_id for s in first.started] == ["promo"]
    second = await agent.turn(message("e o preço?", "m2", session=first.session))
    assert second.llm_calls == 1
    assert section_properties(provider.calls[1].json_schema, "mentions") == {"preco"}
    assert [m.text for m in second.messages] == ["Custa 10."]


async def test_understand_sees_the_message_and_the_history() -> None:
    """The understand call reads the customer's message (and the history before it)."""
    provider = MockProvider([{"flows": {"vendas": 0, "suporte": 90}}])
    agent = build(
        provider,
        idle="silent",
        flows=[
            phrase_flow("vendas", ["quero comprar"], [say("a", "Planos!")]),
            phrase_flow("suporte", ["problema"], [say("b", "Suporte!")]),
        ],
    )
    history = [{"role": "user", "text": "HISTORY_X"}, {"role": "assistant", "text": "Oi!"}]
    await agent.turn(message("MESSAGE_X", history=history))
    (call,) = provider.calls
    assert [(m.role, m.text) for m in call.messages] == [
        ("user", "HISTORY_X"),
        ("assistant", "Oi!"),
        ("user", "MESSAGE_X"),
    ]
    assert "MESSAGE_X" in call.system
    assert call.tools == []


def _completion(content: str, finish: str = "stop") -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": content},
                         "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5}}


async def test_unusable_understand_replies_from_a_server_are_empty_judgements_and_count() -> None:
    """Through the OpenAI-compatible provider, many conversations at once: a reply cut off at
    the token cap, one that is not JSON, one holding NaN and an empty one are each read as an
    empty judgement (the catch-all answers, the call counts, nothing raises); a good reply next
    to them starts its flow; a 503 is still a ProviderError the host retries."""
    import asyncio
    import json

    import httpx

    from engine.providers.openai import OpenAIProvider

    replies = {
        "cut": _completion('{"flows": {"vendas": 9', "length"),
        "prose": _completion("Claro! Posso ajudar com isso."),
        "nan": _completion('{"flows": {"vendas": NaN, "suporte": 0}}'),
        "empty": _completion(""),
        "good": _completion('{"flows": {"vendas": 95, "suporte": 0}}'),
    }

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        said = json.dumps(body["messages"])
        if "down" in said:
            return httpx.Response(503, json={"error": "overloaded"})
        kind = next(k for k in replies if f"quero comprar {k}" in said)
        return httpx.Response(200, json=replies[kind])

    provider = OpenAIProvider(
        api_key="k", base_url="http://stand-in/v1", transport=httpx.MockTransport(answer)
    )
    flows = [
        phrase_flow("vendas", ["quero comprar"], [say("a", "Planos!")]),
        phrase_flow("suporte", ["problema"], [say("b", "Suporte!")]),
        phrase_flow("geral", [], [say("c", "Olá, sou a Ana.")]),
    ]
    agent = Agent(name="Ana", provider=provider, clock=FakeClock("2026-01-05T09:00:00Z"),
                  fields=FIELDS, flows=flows)
    kinds = [k for _ in range(8) for k in replies]
    try:
        results = await asyncio.gather(*(
            agent.turn({"session_id": f"s{i}", "message": f"quero comprar {kind}", "id": f"m{i}"})
            for i, kind in enumerate(kinds)
        ))
        with pytest.raises(ProviderError) as failed:
            await agent.turn({"session_id": "sx", "message": "quero comprar down", "id": "m"})
        assert failed.value.kind == "retryable"
    finally:
        await provider.aclose()
    for i, (kind, result) in enumerate(zip(kinds, results, strict=True)):
        assert result.session.id == f"s{i}"
        assert result.llm_calls == 1, kind
        codes = [o.code for o in result.outcomes]
        if kind == "good":
            assert [s.flow_id for s in result.started] == ["vendas"]
            assert [m.text for m in result.messages] == ["Planos!"]
            assert "unparsed-reply" not in codes
        else:
            assert [s.flow_id for s in result.started] == ["geral"], kind
            assert [m.text for m in result.messages] == ["Olá, sou a Ana."]
            assert "unparsed-reply" in codes, kind
