"""Seed 000, phases 7 (Settle bookkeeping) and 8 (Return), spending no model call."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from engine import TurnResult
from tests.scenarios.support import code_only_agent, codes, saved

HELLO = {"id": "hello", "on": [{"message": []}], "steps": [{"id": "s", "say": "Olá"}]}
NUDGE = {
    "id": "nudge",
    "on": [{"silence": 600_000}],
    "steps": [{"id": "n", "say": "Ainda está por aí?"}],
}


def message(text: str, msg_id: str, session: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"session_id": "s1", "message": text, "id": msg_id, "session": session}


async def test_last_assistant_at_is_set_when_anything_went_out() -> None:
    """lastAssistantAt is set when anything went out."""
    agent, _, clock = code_only_agent([HELLO])
    result = await agent.turn(message("oi", "m1"))
    assert result.session.last_assistant_at == clock.now() and result.llm_calls == 0
    quiet, _, _ = code_only_agent([], idle="silent")
    nothing = await quiet.turn(message("oi", "m1"))
    assert nothing.session.last_assistant_at is None and nothing.llm_calls == 0


async def test_silence_wake_is_scheduled_after_the_assistant_spoke() -> None:
    """When the assistant spoke last, every silence flow whose if and repeat allow it gets a
    wake at lastAssistantAt + silence, key silence:${flowId}:${sessionId}:${lastAssistantAtMs}.

    The key carries the conversation as every engine key does: ``silence@{session}:{flow}:{ms}``."""
    agent, _, clock = code_only_agent([HELLO, NUDGE])
    result = await agent.turn(message("oi", "m1"))
    (entry,) = result.schedule
    stamp = int(clock.now().timestamp() * 1000)
    assert entry.key == f"silence@s1:nudge:{stamp}"
    assert entry.at == clock.now() + timedelta(minutes=10)
    assert entry.replaces is None and result.llm_calls == 0


async def test_next_silence_wake_replaces_the_previous_one() -> None:
    """with replaces naming the previous one."""
    agent, _, clock = code_only_agent([HELLO, NUDGE])
    first = await agent.turn(message("oi", "m1"))
    clock.advance(60)
    second = await agent.turn(message("de novo", "m2", saved(first)))
    (entry,) = second.schedule
    assert entry.replaces == first.schedule[0].key and entry.key != entry.replaces
    assert second.llm_calls == 0


async def test_silence_flow_if_and_repeat_gate_the_wake() -> None:
    """every silence flow whose if and repeat allow it gets a wake."""
    gated = {**NUDGE, "on": [{"silence": 600_000, "if": {"known": "nome"}}]}
    agent, _, _ = code_only_agent([HELLO, gated])
    result = await agent.turn(message("oi", "m1"))
    assert result.schedule == [] and result.llm_calls == 0


async def test_silence_wake_starts_the_flow_while_the_silence_holds() -> None:
    """A key starting with silence: is a silence wake: it starts the silence flow only while
    the session still shows that silence."""
    agent, _, clock = code_only_agent([HELLO, NUDGE])
    first = await agent.turn(message("oi", "m1"))
    (entry,) = first.schedule
    clock.set(entry.at)
    woke = await agent.turn({"session_id": "s1", "wake": entry.key, "session": saved(first)})
    assert [m.text for m in woke.messages] == ["Ainda está por aí?"]
    assert [s.flow_id for s in woke.started] == ["nudge"] and woke.llm_calls == 0


async def test_silence_wake_after_a_reply_is_stale() -> None:
    """it starts the silence flow only while the session still shows that silence."""
    agent, _, clock = code_only_agent([NUDGE], idle="silent")
    hello, _, _ = code_only_agent([HELLO, NUDGE], clock=clock)
    first = await hello.turn(message("oi", "m1"))
    (entry,) = first.schedule
    clock.advance(60)
    replied = await agent.turn(message("voltei", "m2", saved(first)))
    clock.set(entry.at)
    woke = await agent.turn({"session_id": "s1", "wake": entry.key, "session": saved(replied)})
    assert codes(woke) == ["stale-wake"] and woke.changed is False and woke.llm_calls == 0


async def test_result_carries_every_field_and_keeps_the_version() -> None:
    """TurnResult: session (version unchanged by the turn), changed, messages in emission
    order, schedule, outcomes, started, ended, skipped, llmCalls."""
    flow = {
        "id": "f",
        "on": [{"message": []}],
        "steps": [{"id": "a", "say": "1"}, {"id": "b", "say": "2"}],
    }
    agent, _, _ = code_only_agent([flow])
    result = await agent.turn(message("oi", "m1", {"id": "s1", "v": 4, "version": 7}))
    assert isinstance(result, TurnResult)
    assert result.session.version == 7
    assert [m.text for m in result.messages] == ["1", "2"]
    assert [(s.flow_id, s.reason) for s in result.started] == [("f", "message")]
    assert [(e.flow_id, e.reason) for e in result.ended] == [("f", "completed")]
    assert result.skipped == [] and result.schedule == [] and result.changed is True
    assert result.llm_calls == 0


async def test_a_skip_alone_makes_the_turn_changed() -> None:
    """changed is false ... with no message, no wake, no outcome and no skip to show."""
    agent, _, _ = code_only_agent([HELLO])
    result = await agent.turn({"session_id": "s1", "start": {"flow": "gone", "key": "k"}})
    assert result.changed is True and [s.code for s in result.skipped] == ["flow-gone"]
    assert result.llm_calls == 0
