"""Lifecycle step 1, the plan check: a plan without the agent means no model call, nothing
billed, a hand-off with reason plan_gated when escalation is on, else silence; outcome gated."""

from __future__ import annotations

import asyncio
from typing import Any

from engine import Agent, FakeClock
from tests.scenarios.lifecycle_support import (
    CHAT_FLOW,
    START,
    EchoProvider,
    conversation,
    lifecycle_agent,
    message,
    said,
)
from tests.scenarios.support import codes

ESCALATION: dict[str, Any] = {
    "escalation": True, "handoff": {"message": "Vou chamar uma pessoa.", "tag": "vendas"}}


async def test_a_plan_without_the_agent_and_no_escalation_is_silent() -> None:
    """Gated without escalation: no call, no message, no run, outcome gated, nothing billed."""
    agent, provider = lifecycle_agent([], {"plan_check": lambda session: False})
    result = await agent.turn(message("oi", "m1"))
    assert provider.calls == [] and result.llm_calls == 0
    assert result.messages == [] and result.started == [] and result.session.runs == []
    assert result.turn_outcome == "gated" and "gated" in codes(result)
    assert result.session.last_user_at is not None
    assert "m1" in result.session.inputs


async def test_with_escalation_the_gated_turn_hands_over_with_plan_gated() -> None:
    """Gated with escalation: one hand-off message, reason plan_gated, still outcome gated."""
    agent, provider = lifecycle_agent([], {"plan_check": lambda session: False, **ESCALATION})
    result = await agent.turn(message("oi", "m1"))
    assert provider.calls == []
    [sent] = result.messages
    assert sent.kind == "handoff" and sent.text == "Vou chamar uma pessoa."
    assert sent.handoff is not None
    assert (sent.handoff.reason, sent.handoff.tag) == ("plan_gated", "vendas")
    assert result.turn_outcome == "gated"
    assert result.session.metadata["lifecycle"]["handoff"]["reason"] == "plan_gated"


async def test_after_a_plan_gated_hand_off_the_session_stays_silent_without_asking() -> None:
    """The hand-off holds: the next message is handed-off and the plan is not asked again."""
    asked: list[str] = []

    def plan(session: Any) -> bool:
        asked.append(session.id)
        return False

    agent, _ = lifecycle_agent([], {"plan_check": plan, **ESCALATION})
    first = await agent.turn(message("oi", "m1"))
    second = await agent.turn(message("alô?", "m2", first))
    assert asked == ["s1"]
    assert second.messages == [] and "handed-off" in codes(second)


async def test_an_async_check_is_awaited_and_given_the_session() -> None:
    """An async plan check gets this conversation's session and its answer is honoured."""
    seen: list[tuple[str, int]] = []

    async def plan(session: Any) -> bool:
        await asyncio.sleep(0)
        seen.append((session.id, len(session.inputs)))
        return True

    agent, _ = lifecycle_agent([said("Olá!")], {"plan_check": plan})
    result = await agent.turn(message("oi", "m1"))
    assert seen == [("s1", 0)]
    assert [m.text for m in result.messages] == ["Olá!"] and result.turn_outcome == "answered"


async def test_a_host_start_is_gated_too_and_starts_nothing() -> None:
    """A Flow starting the agent on a plan without it: no run, no call, outcome gated."""
    agent, provider = lifecycle_agent([], {"plan_check": lambda session: False})
    result = await agent.turn({"session_id": "s1", "start": {"flow": "chat", "key": "k1"}})
    assert result.started == [] and provider.calls == [] and result.turn_outcome == "gated"


async def test_wakes_and_events_are_not_asked_about() -> None:
    """A wake of a running plan continues what code started: the check is not called."""
    asked: list[str] = []
    flow = {"id": "lembrete", "on": [{"message": []}],
            "steps": [{"id": "w", "wait": {"ms": 60_000}}, {"id": "s", "say": "Ainda aí?"}]}

    def plan(session: Any) -> bool:
        asked.append(session.id)
        return len(asked) == 1  # included for the message, excluded afterwards

    agent, _ = lifecycle_agent([], {"plan_check": plan}, flows=[flow], idle="silent")
    first = await agent.turn(message("oi", "m1"))
    [wake] = first.schedule
    later = await agent.turn({"session_id": "s1", "wake": wake.key, "session": first.session})
    assert asked == ["s1"]
    assert [m.text for m in later.messages] == ["Ainda aí?"]


async def test_an_agent_without_a_plan_check_is_never_gated() -> None:
    """No plan_check: every turn is included."""
    agent, _ = lifecycle_agent([said("Olá!")], {})
    result = await agent.turn(message("oi", "m1"))
    assert result.turn_outcome == "answered"


async def test_many_conversations_are_gated_each_by_its_own_plan() -> None:
    """Forty conversations at once, half on a plan without the agent: each gets its own answer
    (a reply naming its own message, or silence, or a plan_gated hand-off), nothing crosses."""
    included = {f"s{i}" for i in range(0, 40, 2)}
    provider = EchoProvider()

    async def plan(session: Any) -> bool:
        await asyncio.sleep(0)
        return session.id in included

    for escalation in (False, True):
        settings: dict[str, Any] = {"plan_check": plan, **(ESCALATION if escalation else {})}
        agent = Agent(name="Ana", provider=provider, clock=FakeClock(START), flows=[CHAT_FLOW],
                      lifecycle=settings)
        ids = [f"s{i}" for i in range(40)]
        keys: list[str] = []
        results = await asyncio.gather(
            *(agent.turn(conversation(sid, f"pergunta de {sid}", f"{sid}-m1")) for sid in ids))
        for sid, result in zip(ids, results, strict=True):
            assert result.session.id == sid
            if sid in included:
                assert result.turn_outcome == "answered"
                assert [m.text for m in result.messages] == [f"eco: pergunta de {sid}"]
            else:
                assert result.turn_outcome == "gated" and result.llm_calls == 0
                if escalation:
                    [sent] = result.messages
                    assert sent.handoff is not None and sent.handoff.reason == "plan_gated"
                    keys.append(sent.key)
                else:
                    assert result.messages == []
        assert len(set(keys)) == len(keys) == (20 if escalation else 0)
    assert len(provider.calls) == 40  # one speak call per included conversation, per round

