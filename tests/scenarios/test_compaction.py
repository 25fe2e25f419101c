"""Seed 000, phase 1 (Load) and engine.md §8: compaction trims history once per turn."""

from __future__ import annotations

from typing import Any

from engine import Agent, FakeClock, MockProvider, ModelResponse

FIELDS: dict[str, Any] = {"nome": {"type": "string", "ask": "Pergunte o nome."}}
WELCOME = {
    "id": "boas-vindas",
    "on": [{"message": []}],
    "steps": [{"id": "nome", "collect": ["nome"]}],
}
SUMMARY = "RESUMO_X: a pessoa quer um plano para a ACME."


def build(provider: MockProvider, **compaction: Any) -> Agent:
    return Agent(
        name="Ana",
        provider=provider,
        clock=FakeClock("2026-01-05T09:00:00Z"),
        fields=FIELDS,
        flows=[WELCOME],
        compaction=compaction,
    )


def history(entries: int, size: int, start: int = 0) -> list[dict[str, str]]:
    roles = ("user", "assistant")
    return [
        {"role": roles[i % 2], "text": f"ENTRY_{i:03d} " + "x" * size}
        for i in range(start, start + entries)
    ]


def message(text: str, msg_id: str, **extra: Any) -> dict[str, Any]:
    return {"session_id": "s1", "message": text, "id": msg_id, **extra}


def summary_reply() -> ModelResponse:
    return ModelResponse(text=SUMMARY, json={"summary": SUMMARY})


def speak_reply() -> dict[str, Any]:
    return {"message": "Como posso te chamar?", "nome": None}


def seen_by(call: Any) -> str:
    return call.system + "\n" + "\n".join(m.text for m in call.messages)


async def test_summary_call_runs_first_and_replaces_the_dropped_head() -> None:
    """When the agent has compaction, the history is trimmed here, once per turn, before either call sees it."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider([summary_reply(), speak_reply()])
    agent = build(provider, keep_last=10, max_chars=500, summarize=True)
    result = await agent.turn(message("oi", "m1", history=history(30, 100)))
    assert result.llm_calls == 2
    compact, speak = provider.calls
    assert (compact.schema_name, speak.schema_name) == ("compact", "speak")
    assert "ENTRY_000" in seen_by(compact)
    spoken = seen_by(speak)
    assert SUMMARY in spoken
    assert "ENTRY_000" not in spoken
    assert "ENTRY_029" in spoken


async def test_code_layers_keep_the_last_entries_without_a_call() -> None:
    """Code layers first (drop tool chatter, keep the last keep_last entries, trim long entries)."""
    provider = MockProvider([speak_reply()])
    agent = build(provider, keep_last=10, max_chars=24000, summarize=True)
    result = await agent.turn(message("oi", "m1", history=history(30, 100)))
    assert result.llm_calls == 1
    spoken = seen_by(provider.calls[0])
    assert "ENTRY_019" not in spoken
    assert all(f"ENTRY_{i:03d}" in spoken for i in range(20, 30))


async def test_short_history_is_passed_whole_without_a_call() -> None:
    """Only when still over max_chars and summarize is set, one "compact" call writes a summary."""
    provider = MockProvider([speak_reply()])
    agent = build(provider, keep_last=40, max_chars=24000, summarize=True)
    result = await agent.turn(message("oi", "m1", history=history(8, 20)))
    assert result.llm_calls == 1
    spoken = seen_by(provider.calls[0])
    assert all(f"ENTRY_{i:03d}" in spoken for i in range(8))


async def test_the_summary_is_kept_and_reused_by_later_turns() -> None:
    """The summary is kept in session.metadata with the history position it covers, so later turns reuse it."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider([summary_reply(), speak_reply(), speak_reply()])
    agent = build(provider, keep_last=10, max_chars=500, summarize=True)
    first = await agent.turn(message("oi", "m1", history=history(30, 100)))
    assert first.llm_calls == 2
    assert SUMMARY in repr(first.session.metadata)
    grown = [
        *history(30, 100),
        {"role": "assistant", "text": "Como posso te chamar?"},
        {"role": "user", "text": "Maria"},
    ]
    second = await agent.turn(message("Maria", "m2", history=grown, session=first.session))
    assert second.llm_calls == 1
    assert [c.schema_name for c in provider.calls] == ["compact", "speak", "speak"]
    assert SUMMARY in seen_by(provider.calls[2])


async def test_the_summary_is_redone_when_the_uncovered_part_grows_past_the_limit() -> None:
    """Later turns summarize again only when the part it does not cover grows past the limit."""
    provider = MockProvider([summary_reply(), speak_reply(), summary_reply(), speak_reply()])
    agent = build(provider, keep_last=10, max_chars=500, summarize=True)
    first = await agent.turn(message("oi", "m1", history=history(30, 100)))
    grown = history(60, 100)
    second = await agent.turn(message("mais", "m2", history=grown, session=first.session))
    assert second.llm_calls == 2
    assert [c.schema_name for c in provider.calls] == ["compact", "speak", "compact", "speak"]


async def test_a_turn_without_model_calls_spends_nothing_on_compaction() -> None:
    """A flow with no talk steps costs zero model calls, however long the history is."""
    provider = MockProvider([])
    agent = Agent(
        name="Ana",
        provider=provider,
        clock=FakeClock("2026-01-05T09:00:00Z"),
        flows=[{"id": "aviso", "on": [{"message": []}], "steps": [{"id": "ola", "say": "Olá!"}]}],
        compaction={"keep_last": 10, "max_chars": 500, "summarize": True},
    )
    result = await agent.turn(message("oi", "m1", history=history(30, 100)))
    assert result.llm_calls == 0
    assert [m.text for m in result.messages] == ["Olá!"]


async def test_tool_chatter_is_dropped_and_long_entries_are_trimmed() -> None:
    """Code layers first (drop tool chatter, keep the last keep_last entries, trim long entries)."""
    provider = MockProvider([speak_reply()])
    agent = build(provider, keep_last=40, max_chars=24000, summarize=True)
    entries = [
        {"role": "user", "text": "LONG_X " + "y" * 20000},
        {"role": "tool", "text": "TOOL_CHATTER_X"},
        {"role": "assistant", "text": "SHORT_X"},
    ]
    result = await agent.turn(message("oi", "m1", history=entries))
    assert result.llm_calls == 1
    texts = [m.text for m in provider.calls[0].messages]
    assert not any("TOOL_CHATTER_X" in t for t in texts)
    (long_entry,) = [t for t in texts if t.startswith("LONG_X")]
    assert len(long_entry) < 20000
    assert "SHORT_X" in texts


async def test_compaction_runs_once_in_a_turn_with_both_calls() -> None:
    """At most two model calls per turn plus one compaction call: the history is trimmed once per turn, before either call sees it."""  # noqa: E501  # the seed sentence, quoted whole
    provider = MockProvider(
        [summary_reply(), {"flows": {"vendas": 90, "suporte": 0}}, speak_reply()]
    )
    agent = Agent(
        name="Ana",
        provider=provider,
        clock=FakeClock("2026-01-05T09:00:00Z"),
        fields=FIELDS,
        flows=[
            {
                "id": "vendas",
                "on": [{"message": ["quero comprar"]}],
                "steps": [{"id": "nome", "collect": ["nome"]}],
            },
            {
                "id": "suporte",
                "on": [{"message": ["problema"]}],
                "steps": [{"id": "s", "say": "Ok"}],
            },
        ],
        compaction={"keep_last": 10, "max_chars": 500, "summarize": True},
    )
    result = await agent.turn(message("quero comprar", "m1", history=history(30, 100)))
    assert result.llm_calls == 3
    assert [c.schema_name for c in provider.calls] == ["compact", "understand", "speak"]
    assert SUMMARY in seen_by(provider.calls[1])
    assert SUMMARY in seen_by(provider.calls[2])
