"""Speak never raises and never leaves a run moving, whatever the provider answers."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Agent, FakeClock, MockProvider, ModelResponse, ProviderError, ToolCall

FLOWS: list[dict[str, Any]] = [
    {
        "id": "cadastro",
        "on": [{"message": []}],
        "steps": [
            {"id": "nome", "collect": ["nome"], "tools": ["lookup"]},
            {"id": "idade", "collect": ["idade"]},
            {"id": "fim", "say": "Obrigado, {{nome}}."},
        ],
    }
]

replies = st.one_of(
    st.builds(lambda n: {"message": "Qual o seu nome?", "nome": n}, st.sampled_from([None, "Ana"])),
    st.builds(lambda a: {"message": "E a idade?", "idade": a}, st.sampled_from([None, "30", "x"])),
    st.just({"message": None}),
    st.just(ModelResponse(text="texto solto")),
    st.just(ModelResponse(tool_calls=[ToolCall(id="c", name="lookup", arguments={})])),
    st.builds(ProviderError, st.just("down"), kind=st.sampled_from(["retryable", "fatal"])),
    st.just(RuntimeError("socket closed")),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(replies, min_size=1, max_size=8))
def test_speak_never_raises(script: list[Any]) -> None:
    """A provider failure or an empty message returns deferred instead of throwing; only the
    idle speaker, which has no step to re-park, raises a retryable failure for the host to
    retry the message (the session the host holds is untouched, so the retry starts over)."""

    async def play() -> None:
        clock = FakeClock("2026-01-05T09:00:00Z")
        provider = MockProvider([*script] + [{"message": "ok"}] * 50)
        agent = Agent(
            name="Ana",
            provider=provider,
            clock=clock,
            fields={"nome": {"type": "string"}, "idade": {"type": "integer"}},
            flows=FLOWS,
            tools={"lookup": {"handler": lambda args: {"found": False}}},
            max_tool_loops=2,
        )
        stored: Any = None
        for i in range(len(script)):
            request = {"session_id": "s1", "message": f"msg {i}", "id": f"m{i}", "session": stored}
            while True:  # the host retries the message until it is answered
                try:
                    result = await agent.turn(request)
                    break
                except ProviderError as exc:
                    assert exc.kind == "retryable" and str(exc).startswith("idle: "), exc
            assert all(r.status != "running" for r in result.session.runs)
            assert result.llm_calls <= 3
            assert sum(o.llm_calls for o in result.outcomes) == result.llm_calls
            for entry in result.schedule:
                assert ":retry:" in entry.key
            stored = result.session.model_dump(mode="json")
            clock.advance(60)

    asyncio.run(play())
