"""Seed 000, phases 6 (Speak) and 7 (Settle): the one speaker, its envelope, tools and retries."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from jsonschema import Draft202012Validator

from engine import Agent, FakeClock, MockProvider, ModelResponse, ProviderError, ToolCall
from engine.prompt import DEFAULT_GUIDELINE, NO_MESSAGE_NOTE, RETRY_NOTE
from tests.scenarios.support import codes, session_with

FIELDS: dict[str, Any] = {
    "nome": {"type": "string", "ask": "Pergunte o nome."},
    "empresa": {"type": "string", "ask": "Pergunte a empresa."},
    "email": {"type": "email", "ask": "Pergunte o e-mail."},
    "cliente_id": {"type": "string"},
}


def build(provider: MockProvider, clock: FakeClock | None = None, **config: Any) -> Agent:
    config.setdefault("fields", FIELDS)
    return Agent(
        name="Ana", provider=provider, clock=clock or FakeClock("2026-01-05T09:00:00Z"), **config
    )


def message(text: str = "oi", msg_id: str = "m1", **extra: Any) -> dict[str, Any]:
    return {"session_id": "s1", "message": text, "id": msg_id, **extra}


def catch_all(steps: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"id": "cadastro", "name": "Cadastro", "on": [{"message": []}], "steps": steps, **extra}


def at_ms(entry: Any) -> int:
    return int(entry.at.timestamp() * 1000)


# --- the envelope ------------------------------------------------------------------------------


async def test_speak_envelope_is_message_plus_pending_fields() -> None:
    """The envelope is { message, ...pending fields of this step }, every property required and nullable."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider([{"message": "Seu nome e e-mail?", "nome": "Maria", "email": None}])
    agent = build(
        provider, flows=[catch_all([{"id": "dados", "collect": ["nome", "empresa", "email"]}])]
    )
    result = await agent.turn(message(session=session_with({"empresa": "ACME"})))
    (call,) = provider.calls
    assert call.schema_name == "speak"
    schema = call.json_schema
    assert set(schema["properties"]) == {"message", "nome", "email"}
    assert set(schema["required"]) == {"message", "nome", "email"}
    for name, prop in schema["properties"].items():
        assert Draft202012Validator(prop).is_valid(None), f"{name} is not nullable"
    assert result.session.data == {"empresa": "ACME", "nome": "Maria"}
    assert result.session.runs[0].asked == {"email": 1}


async def test_one_call_both_answers_and_extracts() -> None:
    """The envelope is { message, ...pending fields of this step }, so one call both answers and extracts."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider([{"message": "Obrigada, Maria!", "nome": "Maria"}])
    agent = build(
        provider,
        flows=[catch_all([{"id": "nome", "collect": ["nome"]}, {"id": "fim", "say": "Até logo."}])],
    )
    result = await agent.turn(message("sou a Maria"))
    assert result.llm_calls == 1
    assert result.session.data["nome"] == "Maria"
    assert [(m.kind, m.text) for m in result.messages] == [
        ("ai", "Obrigada, Maria!"),
        ("verbatim", "Até logo."),
    ]


# --- tools -------------------------------------------------------------------------------------


def lookup_tool(log: list[Any]) -> dict[str, Any]:
    from engine import Tool

    def lookup(args: dict[str, Any], ctx: Any = None) -> dict[str, Any]:
        log.append(args)
        return {"result": {"cliente": "ACME"}, "data": {"cliente_id": "42"}}

    return {
        "lookup": Tool(
            description="Busca o cliente pelo e-mail.",
            parameters={"type": "object", "properties": {"email": {"type": "string"}}},
            handler=lookup,
        )
    }


async def test_tool_rounds_end_with_one_call_without_tools() -> None:
    """After maxToolLoops rounds it is asked once more without tools, so a message always comes back."""  # noqa: E501  # the seed sentence, quoted whole
    log: list[Any] = []
    call = ToolCall(id="t1", name="lookup", arguments={"email": "m@acme.com"})
    provider = MockProvider(
        [
            ModelResponse(tool_calls=[call], json={"message": None, "nome": "Maria"}),
            ModelResponse(
                tool_calls=[call.model_copy(update={"id": "t2"})],
                json={"message": None, "nome": "Mariana"},
            ),
            {"message": "Achei o seu cadastro!"},
        ]
    )
    agent = build(
        provider,
        tools=lookup_tool(log),
        max_tool_loops=2,
        flows=[catch_all([{"id": "nome", "collect": ["nome"], "tools": ["lookup"]}])],
    )
    result = await agent.turn(message())
    assert len(provider.calls) == 3
    assert result.llm_calls == 3
    assert [[t.name for t in c.tools] for c in provider.calls] == [["lookup"], ["lookup"], []]
    assert len(log) == 2
    assert any(m.role == "tool" for m in provider.calls[1].messages)
    assert [m.text for m in result.messages] == ["Achei o seu cadastro!"]
    assert [o.llm_calls for o in result.outcomes if o.step_id == "nome" and o.llm_calls] == [3]
    # Field values merge across rounds, last one wins; tool data patches are written as given.
    assert result.session.data["nome"] == "Mariana"
    assert result.session.data["cliente_id"] == "42"


async def test_zero_tool_loops_disables_tools() -> None:
    """maxToolLoops (default 5; 0 disables tools)."""
    log: list[Any] = []
    provider = MockProvider([{"message": "Qual o seu nome?", "nome": None}])
    agent = build(
        provider,
        tools=lookup_tool(log),
        max_tool_loops=0,
        flows=[catch_all([{"id": "nome", "collect": ["nome"], "tools": ["lookup"]}])],
    )
    result = await agent.turn(message())
    assert result.llm_calls == 1
    assert provider.calls[0].tools == []
    assert log == []


# --- one speaker -------------------------------------------------------------------------------


async def test_another_run_answering_skips_the_floor_talk() -> None:
    """When a run other than the floor holder already answered the message this turn, the floor's talk is skipped (code: 'another-reply') and that run stays asking for the next message."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider(
        [
            {"message": "Qual o seu nome?", "nome": None},
            {"flows": {"cadastro": 80}, "mentions": {"preco": True}},
        ]
    )
    agent = build(
        provider,
        flows=[
            catch_all([{"id": "nome", "collect": ["nome"]}]),
            {
                "id": "preco",
                "on": [{"mention": ["preço"]}],
                "steps": [{"id": "p", "say": "Custa 10."}],
            },
        ],
    )
    start = {"session_id": "s1", "start": {"flow": "cadastro", "key": "k0"}}
    first = await agent.turn(start)
    second = await agent.turn(message("quanto custa?", "m2", session=first.session))
    assert second.llm_calls == 1
    assert [c.schema_name for c in provider.calls] == ["speak", "understand"]
    assert [m.text for m in second.messages] == ["Custa 10."]
    assert "another-reply" in codes(second)
    asker = next(r for r in second.session.runs if r.flow_id == "cadastro")
    assert asker.status == "asking"


async def test_one_speaker_per_turn() -> None:
    """One speaker per turn: a second run reaching a talk step waits for the next message."""
    provider = MockProvider(
        [
            {"mentions": {"orcamento": True}},
            {"message": "Qual o seu nome?", "nome": None},
        ]
    )
    agent = build(
        provider,
        flows=[
            catch_all([{"id": "nome", "collect": ["nome"]}]),
            {
                "id": "orcamento",
                "on": [{"mention": ["orçamento"]}],
                "steps": [{"id": "empresa", "collect": ["empresa"]}],
            },
        ],
    )
    result = await agent.turn(message("quero um orçamento"))
    assert result.llm_calls == 2
    assert [c.schema_name for c in provider.calls] == ["understand", "speak"]
    assert [m.kind for m in result.messages] == ["ai"]
    assert sorted(r.status for r in result.session.runs) == ["asking", "suspended"]


async def test_a_runs_own_say_never_silences_its_own_talk() -> None:
    """A run's own say never silences its own talk."""
    provider = MockProvider([{"message": "Como posso te chamar?", "nome": None}])
    agent = build(
        provider,
        flows=[catch_all([{"id": "ola", "say": "Olá!"}, {"id": "nome", "collect": ["nome"]}])],
    )
    result = await agent.turn(message())
    assert result.llm_calls == 1
    assert [(m.kind, m.text) for m in result.messages] == [
        ("verbatim", "Olá!"),
        ("ai", "Como posso te chamar?"),
    ]


async def test_idle_speaker_message_key_is_idle_and_the_trigger_key() -> None:
    """The message goes to messages[] as kind: 'ai' with key = ${runId}:${stepId}:${visit}, or idle:<trigger key> for the idle speaker."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider([{"message": "Olá! Em que posso ajudar?"}])
    agent = build(provider, idle="IDLE_GUIDELINE_X", flows=[])
    result = await agent.turn(message("bom dia", "m7"))
    assert [(m.kind, m.key) for m in result.messages] == [("ai", "idle@s1:m7")]
    assert "IDLE_GUIDELINE_X" in provider.calls[0].system
    assert set(provider.calls[0].json_schema["properties"]) == {"message"}
    assert [o.llm_calls for o in result.outcomes if o.llm_calls] == [1]


async def test_talk_message_key_is_run_step_visit() -> None:
    """The message goes to messages[] as kind: 'ai' with key = ${runId}:${stepId}:${visit}."""
    provider = MockProvider([{"message": "Qual o seu nome?", "nome": None}])
    agent = build(provider, flows=[catch_all([{"id": "nome", "collect": ["nome"]}])])
    result = await agent.turn(message())
    (run,) = result.session.runs
    assert [(m.kind, m.key) for m in result.messages] == [("ai", f"{run.id}:nome:{run.visit}")]


# --- settle: asks, max-asks, stay --------------------------------------------------------------


async def test_each_field_still_pending_gets_asked_plus_one() -> None:
    """Each field still pending gets asked + 1 and the run stays asking."""
    provider = MockProvider(
        [
            {"message": "Seu nome e e-mail?", "nome": None, "email": None},
            {"message": "E o e-mail?", "nome": "Maria", "email": None},
        ]
    )
    agent = build(provider, flows=[catch_all([{"id": "dados", "collect": ["nome", "email"]}])])
    first = await agent.turn(message())
    (run,) = first.session.runs
    assert (run.status, run.asked) == ("asking", {"nome": 1, "email": 1})
    second = await agent.turn(message("Maria", "m2", session=first.session))
    (run,) = second.session.runs
    assert run.status == "asking"
    assert run.asked["email"] == 2
    assert run.asked.get("nome", 1) == 1


async def test_the_last_ask_still_waits_for_the_answer() -> None:
    """Each field still pending gets asked + 1 and the run stays asking (the ask that reaches maxAsks included)."""  # noqa: E501  # the seed sentence, quoted whole
    fields = {**FIELDS, "nome": {"type": "string", "ask": "Pergunte o nome.", "max_asks": 1}}
    provider = MockProvider([{"message": "Qual o seu nome?", "nome": None}])
    agent = build(
        provider,
        fields=fields,
        flows=[
            catch_all([{"id": "nome", "collect": ["nome"]}, {"id": "fim", "say": "Seguimos sem."}])
        ],
    )
    first = await agent.turn(message())
    assert [m.text for m in first.messages] == ["Qual o seu nome?"]
    assert "max-asks" not in codes(first)
    (run,) = first.session.runs
    assert (run.status, run.asked) == ("asking", {"nome": 1})
    # The answer to the last ask is the next message; with nothing left to ask, the step is
    # skipped without a call, the field reported, and the run moves on.
    second = await agent.turn(message("prefiro não dizer", "m2", session=first.session))
    assert second.llm_calls == 0
    assert [o.step_id for o in second.outcomes if o.code == "max-asks"] == ["nome"]
    assert [m.text for m in second.messages] == ["Seguimos sem."]
    assert second.session.runs == []


async def test_a_field_at_max_asks_is_reported_when_nothing_else_is_pending() -> None:
    """Nothing pending: a field that hit maxAsks is reported (code: 'max-asks', one line per field), the run takes then and keeps moving this turn."""  # noqa: E501  # the seed sentence, quoted whole
    fields = {**FIELDS, "nome": {"type": "string", "ask": "Pergunte o nome.", "max_asks": 1}}
    provider = MockProvider(
        [
            {"message": "Seu nome e e-mail?", "nome": None, "email": None},
            {"message": "Anotado!", "email": "m@acme.com"},
        ]
    )
    agent = build(
        provider,
        fields=fields,
        flows=[
            catch_all(
                [{"id": "dados", "collect": ["nome", "email"]}, {"id": "fim", "say": "Seguimos."}]
            )
        ],
    )
    first = await agent.turn(message())
    assert first.session.runs[0].asked == {"nome": 1, "email": 1}
    second = await agent.turn(message("m@acme.com", "m2", session=first.session))
    assert second.llm_calls == 1
    assert set(provider.calls[1].json_schema["properties"]) == {"message", "email"}
    assert [o.detail for o in second.outcomes if o.code == "max-asks"] == ["nome"]
    assert [m.text for m in second.messages] == ["Anotado!", "Seguimos."]
    assert second.session.runs == []


async def test_on_end_stay_answers_again_one_visit_later() -> None:
    """A run staying on its step (onEnd: 'stay') takes no then: it stays there for the next message, one visit later."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider([{"message": "Posso ajudar?"}, {"message": "Claro, de novo!"}])
    agent = build(
        provider,
        flows=[catch_all([{"id": "faq", "prompt": "Tire dúvidas."}], on_end="stay")],
    )
    first = await agent.turn(message())
    (run,) = first.session.runs
    assert (run.step_id, run.status) == ("faq", "asking")
    second = await agent.turn(message("e mais uma?", "m2", session=first.session))
    (again,) = second.session.runs
    assert again.id == run.id
    assert again.visit == run.visit + 1
    assert [m.key for m in second.messages] == [f"{run.id}:faq:{run.visit + 1}"]
    assert second.llm_calls == 1


# --- deferred speak: the retry ladder ----------------------------------------------------------


async def test_retryable_failure_walks_the_retry_ladder_then_fails() -> None:
    """A failure a wait can fix re-parks the talk step under ${runId}:${stepId}:${visit}:retry:${atMs}: +1m, +5m, +15m, +1h, +6h, then the run ends failed."""  # noqa: E501  # the seed sentence, quoted whole
    clock = FakeClock("2026-01-05T09:00:00Z")
    provider = MockProvider([ProviderError("503", kind="retryable") for _ in range(6)])
    agent = build(provider, clock, flows=[catch_all([{"id": "nome", "collect": ["nome"]}])])
    result = await agent.turn(message())
    assert result.llm_calls == 1
    assert result.messages == []
    for minutes in (1, 5, 15, 60, 360):
        (entry,) = result.schedule
        assert entry.at == clock.now() + timedelta(minutes=minutes)
        (run,) = result.session.runs
        assert entry.key == f"{run.id}:nome:{run.visit}:retry:{at_ms(entry)}"
        clock.set(entry.at)
        wake = {"session_id": "s1", "wake": entry.key, "session": result.session}
        result = await agent.turn(wake)
        assert result.llm_calls == 1
    assert len(provider.calls) == 6
    assert result.session.runs == []
    assert result.schedule == []
    assert [e.flow_id for e in result.ended] == ["cadastro"]
    assert "failed" in {e.reason for e in result.ended} | {o.status for o in result.outcomes}


async def test_empty_message_is_deferred_like_a_failure() -> None:
    """A provider failure or an empty message returns deferred instead of throwing; phase 7 re-parks the step."""  # noqa: E501  # the seed sentence, quoted whole
    clock = FakeClock("2026-01-05T09:00:00Z")
    provider = MockProvider([{"message": "", "nome": None}])
    agent = build(provider, clock, flows=[catch_all([{"id": "nome", "collect": ["nome"]}])])
    result = await agent.turn(message())
    assert result.messages == []
    (entry,) = result.schedule
    assert entry.at == clock.now() + timedelta(minutes=1)
    assert ":retry:" in entry.key


async def test_fatal_failure_ends_the_run_at_once() -> None:
    """A failure it cannot fix — a rejected key, a prompt past the context window — ends the run at once."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider([ProviderError("401 invalid key", kind="fatal", status=401)])
    agent = build(provider, flows=[catch_all([{"id": "nome", "collect": ["nome"]}])])
    result = await agent.turn(message())
    assert result.llm_calls == 1
    assert result.messages == []
    assert result.schedule == []
    assert result.session.runs == []
    assert [e.flow_id for e in result.ended] == ["cadastro"]


async def test_retry_keeps_what_phase_five_did_and_reruns_only_the_talk_step() -> None:
    """The retry wake re-runs the step under the same key, so the do steps before it do not run again."""  # noqa: E501  # the seed sentence, quoted whole
    clock = FakeClock("2026-01-05T09:00:00Z")
    done: list[str] = []
    provider = MockProvider(
        [ProviderError("timeout", kind="retryable"), {"message": "Qual o seu nome?", "nome": None}]
    )
    agent = build(
        provider,
        clock,
        actions={"notify": lambda ctx: done.append(ctx.key) or {"ok": True}},
        flows=[
            catch_all(
                [
                    {"id": "ola", "say": "Olá!"},
                    {"id": "avisa", "do": "notify"},
                    {"id": "nome", "collect": ["nome"]},
                ]
            )
        ],
    )
    first = await agent.turn(message())
    assert [m.text for m in first.messages] == ["Olá!"]
    (entry,) = first.schedule
    clock.set(entry.at)
    second = await agent.turn({"session_id": "s1", "wake": entry.key, "session": first.session})
    assert [(m.kind, m.text) for m in second.messages] == [("ai", "Qual o seu nome?")]
    assert len(done) == 1
    (run,) = second.session.runs
    assert second.messages[0].key == f"{run.id}:nome:{run.visit}"


async def test_retry_prompt_says_the_customer_message_has_no_answer_yet() -> None:
    """When the host's history still ends with the customer's message, the retry's speak call is told that message has no answer yet, rather than that the assistant speaks first."""  # noqa: E501  # the seed sentence, quoted whole
    clock = FakeClock("2026-01-05T09:00:00Z")
    provider = MockProvider(
        [ProviderError("429", kind="retryable"), {"message": "Qual o seu nome?", "nome": None}]
    )
    agent = build(provider, clock, flows=[catch_all([{"id": "nome", "collect": ["nome"]}])])
    first = await agent.turn(message("quero um orçamento"))
    (entry,) = first.schedule
    clock.set(entry.at)
    history = [{"role": "user", "text": "quero um orçamento"}]
    wake = {"session_id": "s1", "wake": entry.key, "session": first.session, "history": history}
    await agent.turn(wake)
    retry = provider.calls[1]
    assert retry.meta.get("retry") is True
    assert RETRY_NOTE in retry.system
    assert NO_MESSAGE_NOTE not in retry.system
    assert "quero um orçamento" in retry.system


async def test_any_other_wake_speaks_first_even_after_a_customer_message() -> None:
    """Only the retry does this: any other wake speaks first, even when the history ends with a customer message."""  # noqa: E501  # the seed sentence, quoted whole
    clock = FakeClock("2026-01-05T09:00:00Z")
    provider = MockProvider([{"message": "Ainda por aí? Qual o seu nome?", "nome": None}])
    agent = build(
        provider,
        clock,
        idle="silent",
        flows=[
            catch_all(
                [{"id": "espera", "wait": {"ms": 60_000}}, {"id": "nome", "collect": ["nome"]}]
            )
        ],
    )
    first = await agent.turn(message("quero um orçamento"))
    assert first.llm_calls == 0
    (entry,) = first.schedule
    clock.set(entry.at)
    history = [{"role": "user", "text": "quero um orçamento"}]
    wake = {"session_id": "s1", "wake": entry.key, "session": first.session, "history": history}
    result = await agent.turn(wake)
    assert result.llm_calls == 1
    spoken = provider.calls[0]
    assert spoken.meta.get("retry") is False
    assert NO_MESSAGE_NOTE in spoken.system
    assert RETRY_NOTE not in spoken.system


async def test_unset_idle_speaker_answers_with_no_guideline_of_its_own() -> None:
    """Left unset, it answers with no guideline of its own."""
    provider = MockProvider([{"message": "Olá!"}])
    agent = build(provider, flows=[])
    result = await agent.turn(message("bom dia", "m7"))
    assert [(m.kind, m.key) for m in result.messages] == [("ai", "idle@s1:m7")]
    assert DEFAULT_GUIDELINE not in provider.calls[0].system


async def test_speak_values_are_validated_like_decide() -> None:
    """Envelope values are validated and written like phase 4."""
    provider = MockProvider(
        [{"message": "Qual o seu e-mail?", "nome": "Maria", "email": "não sei"}]
    )
    agent = build(provider, flows=[catch_all([{"id": "dados", "collect": ["nome", "email"]}])])
    result = await agent.turn(message())
    assert result.session.data == {"nome": "Maria"}
    assert "bad-value" in codes(result)
    assert result.session.runs[0].asked == {"email": 1}


async def test_any_other_provider_exception_is_retryable() -> None:
    """A provider failure or an empty message returns deferred instead of throwing."""
    clock = FakeClock("2026-01-05T09:00:00Z")
    provider = MockProvider([RuntimeError("connection reset")])
    agent = build(provider, clock, flows=[catch_all([{"id": "nome", "collect": ["nome"]}])])
    result = await agent.turn(message())
    assert result.llm_calls == 1
    (entry,) = result.schedule
    assert entry.at == clock.now() + timedelta(minutes=1)
    (run,) = result.session.runs
    assert run.status == "waiting"


async def test_idle_speaker_may_use_its_tools() -> None:
    """The idle speaker: idle on the agent, a prompt (with the tools it may call)."""
    log: list[Any] = []
    call = ToolCall(id="t1", name="lookup", arguments={"email": "m@acme.com"})
    provider = MockProvider([ModelResponse(tool_calls=[call]), {"message": "Encontrei a ACME."}])
    agent = build(
        provider,
        tools=lookup_tool(log),
        idle={"prompt": "Ajude com o cadastro.", "tools": ["lookup"]},
        flows=[],
    )
    result = await agent.turn(message("sou m@acme.com", "m9"))
    assert result.llm_calls == 2
    assert [[t.name for t in c.tools] for c in provider.calls] == [["lookup"], ["lookup"]]
    assert log == [{"email": "m@acme.com"}]
    assert [(m.key, m.text) for m in result.messages] == [("idle@s1:m9", "Encontrei a ACME.")]


async def test_a_talk_step_reached_after_the_reply_waits_for_the_next_message() -> None:
    """Nothing pending: the run takes then and keeps moving this turn, except that a talk step reached now waits for the next message."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider(
        [
            {"message": "Prazer, Maria!", "nome": "Maria"},
            {"message": "Qual o seu e-mail?", "email": "m@acme.com"},
        ]
    )
    agent = build(
        provider,
        flows=[
            catch_all(
                [
                    {"id": "nome", "collect": ["nome"]},
                    {"id": "ola", "say": "Anotado."},
                    {"id": "email", "collect": ["email"]},
                ]
            )
        ],
    )
    first = await agent.turn(message("sou a Maria"))
    assert first.llm_calls == 1
    assert [(m.kind, m.text) for m in first.messages] == [
        ("ai", "Prazer, Maria!"),
        ("verbatim", "Anotado."),
    ]
    (run,) = first.session.runs
    assert (run.step_id, run.status) == ("email", "asking")
    assert run.asked.get("email", 0) == 0
    second = await agent.turn(message("m@acme.com", "m2", session=first.session))
    assert second.llm_calls == 1
    assert second.session.data["email"] == "m@acme.com"
    assert second.session.runs == []


async def test_speak_values_with_unknown_names_are_dropped_and_logged() -> None:
    """Envelope values are validated and written like phase 4: an unknown field name is dropped (code: 'unknown-field')."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider([{"message": "Prazer!", "nome": "Maria", "sobrenome": "Silva"}])
    agent = build(provider, flows=[catch_all([{"id": "dados", "collect": ["nome", "email"]}])])
    result = await agent.turn(message())
    assert result.session.data == {"nome": "Maria"}
    assert "unknown-field" in codes(result)
