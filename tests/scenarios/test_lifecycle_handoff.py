"""Seed 002, hand-off: rules before any model call, the handoff tool, silence until cleared."""

from __future__ import annotations

import json
from typing import Any

from engine import Agent, FakeClock, MockProvider
from tests.scenarios.lifecycle_support import (
    CHAT_FLOW,
    calls,
    lifecycle_agent,
    message,
    said,
    tool_texts,
)
from tests.scenarios.support import codes

RULES: dict[str, Any] = {
    "handoff": {"keywords": ["atendente", "falar com humano"], "tag": "suporte",
                "message": "Vou te passar para uma pessoa."},
}


async def test_a_keyword_hands_off_before_any_model_call() -> None:
    """'Hand-off rules. Checked before any AI call': a keyword costs no call and emits one
    handoff message with reason, summary and tag."""
    agent, provider = lifecycle_agent([], RULES)
    result = await agent.turn(message("Quero um ATENDENTE por favor", "m1"))
    assert result.llm_calls == 0 and provider.calls == []
    [sent] = result.messages
    assert sent.kind == "handoff" and sent.text == "Vou te passar para uma pessoa."
    assert sent.handoff is not None
    notice = sent.handoff
    assert (notice.reason, notice.tag, notice.by) == ("keyword", "suporte", "rule")
    assert "atendente" in sent.handoff.summary.lower()
    assert sent.key == "handoff@s1:m1"
    assert result.turn_outcome == "handoff"
    assert result.session.metadata["lifecycle"]["handoff"]["reason"] == "keyword"
    assert result.session.last_user_at is not None


async def test_a_hand_off_ends_every_live_run() -> None:
    """The human takes the conversation: runs parked from earlier turns end with 'handoff'."""
    waiting_flow = {
        "id": "espera", "on": [{"message": []}],
        "steps": [{"id": "s", "say": "Um momento."}, {"id": "w", "wait": {"ms": 3_600_000}}],
    }
    agent, _ = lifecycle_agent([], RULES, flows=[waiting_flow])
    first = await agent.turn(message("oi", "m1"))
    assert [r.status for r in first.session.runs] == ["waiting"]
    handed = await agent.turn(message("atendente", "m2", first))
    assert handed.session.runs == []
    assert [e.reason for e in handed.ended] == ["handoff"]


async def test_a_handed_off_session_stays_silent_until_cleared() -> None:
    """Every input after a hand-off is only recorded: no call, no message, no timer."""
    agent, provider = lifecycle_agent([said("Olá de novo!")], RULES)
    handed = await agent.turn(message("atendente", "m1"))
    quiet = await agent.turn(message("alô? tem alguém?", "m2", handed))
    assert quiet.messages == [] and quiet.schedule == [] and quiet.llm_calls == 0
    assert codes(quiet) == ["handed-off"] and quiet.turn_outcome is None
    assert "m2" in quiet.session.inputs
    woke = await agent.turn({"session_id": "s1", "wake": "whatever", "session": quiet.session})
    assert codes(woke) == ["handed-off"] and woke.messages == []
    started = await agent.turn({"session_id": "s1", "start": {"flow": "chat", "key": "k1"},
                                "session": woke.session})
    assert started.started == [] and started.messages == []
    cleared = await agent.turn({"session_id": "s1", "event": "handoff_cleared", "key": "e1",
                                "session": started.session})
    assert "handed-back" in codes(cleared)
    assert cleared.session.metadata["lifecycle"]["handoff"] is None
    back = await agent.turn(message("oi", "m3", cleared))
    assert [m.text for m in back.messages] == ["Olá de novo!"] and back.llm_calls == 1
    assert len(provider.calls) == 1


async def test_the_clear_event_name_is_configurable() -> None:
    """handoff.clear_event renames the event that ends the hand-off; others do not clear it."""
    settings = {"handoff": {"keywords": ["atendente"], "clear_event": "humano_saiu"}}
    agent, _ = lifecycle_agent([], settings)
    handed = await agent.turn(message("atendente", "m1"))
    other = await agent.turn({"session_id": "s1", "event": "handoff_cleared", "key": "e1",
                              "session": handed.session})
    assert codes(other) == ["handed-off"]
    cleared = await agent.turn({"session_id": "s1", "event": "humano_saiu", "key": "e2",
                                "session": other.session})
    assert cleared.session.metadata["lifecycle"]["handoff"] is None


async def test_max_turns_answers_that_many_and_hands_off_the_next() -> None:
    """With max_turns 2 the first two messages are answered and the third is handed over."""
    agent, provider = lifecycle_agent([said("um"), said("dois")], {"handoff": {"max_turns": 2}})
    first = await agent.turn(message("a", "m1"))
    second = await agent.turn(message("b", "m2", first))
    third = await agent.turn(message("c", "m3", second))
    assert [first.turn_outcome, second.turn_outcome, third.turn_outcome] == [
        "answered", "answered", "handoff"]
    assert third.messages[0].handoff is not None
    assert third.messages[0].handoff.reason == "max_turns"
    assert third.llm_calls == 0 and len(provider.calls) == 2


async def test_clearing_a_hand_off_starts_the_turn_count_again() -> None:
    """After the host clears a max_turns hand-off, the agent answers max_turns messages again."""
    agent, _ = lifecycle_agent([said("um"), said("dois")], {"handoff": {"max_turns": 1}})
    first = await agent.turn(message("a", "m1"))
    handed = await agent.turn(message("b", "m2", first))
    cleared = await agent.turn({"session_id": "s1", "event": "handoff_cleared", "key": "e1",
                                "session": handed.session})
    again = await agent.turn(message("c", "m3", cleared))
    assert handed.turn_outcome == "handoff" and again.turn_outcome == "answered"


async def test_max_consecutive_fallbacks_hands_off_after_that_many_fallbacks() -> None:
    """Two fallback turns in a row (limit 2) hand the third message over before any call."""
    settings = {"handoff": {"max_consecutive_fallbacks": 2}, "fallback_message": "Não entendi."}
    agent, provider = lifecycle_agent([{"message": None}, {"message": None}], settings)
    first = await agent.turn(message("a", "m1"))
    second = await agent.turn(message("b", "m2", first))
    third = await agent.turn(message("c", "m3", second))
    assert [first.turn_outcome, second.turn_outcome] == ["fallback", "fallback"]
    assert [m.text for m in first.messages] == ["Não entendi."]
    assert third.turn_outcome == "handoff" and third.llm_calls == 0
    assert third.messages[0].handoff is not None
    assert third.messages[0].handoff.reason == "max_consecutive_fallbacks"
    assert len(provider.calls) == 2


async def test_an_answer_resets_the_consecutive_fallbacks() -> None:
    """fallback, answer, fallback: never two in a row, so limit 2 never fires."""
    settings = {"handoff": {"max_consecutive_fallbacks": 2}, "fallback_message": "Hã?"}
    script = [{"message": None}, said("Claro!"), {"message": None}, said("Certo.")]
    agent, _ = lifecycle_agent(script, settings)
    result = None
    outcomes = []
    for i in range(4):
        result = await agent.turn(message(f"msg {i}", f"m{i}", result))
        outcomes.append(result.turn_outcome)
    assert outcomes == ["fallback", "answered", "fallback", "answered"]


async def test_the_handoff_tool_hands_over_with_the_models_reason_and_summary() -> None:
    """The speak call's handoff tool: the loop stops, runs end, a handoff message goes out."""
    settings = {"tools": {"handoff": True}, "escalation": True,
                "handoff": {"tags": ["vip", "billing"]}}
    script = [calls(("handoff", {"reason": "cannot_help", "summary": "Quer estorno.",
                                 "tag": "billing"}), text='{"message": "Já te transfiro."}')]
    agent, provider = lifecycle_agent(script, settings)
    result = await agent.turn(message("quero meu dinheiro de volta", "m1"))
    assert len(provider.calls) == 1 and result.llm_calls == 1
    [sent] = result.messages
    assert sent.kind == "handoff" and sent.text == "Já te transfiro."
    assert sent.handoff is not None
    assert (sent.handoff.reason, sent.handoff.summary, sent.handoff.tag, sent.handoff.by) == (
        "cannot_help", "Quer estorno.", "billing", "tool")
    assert result.turn_outcome == "handoff" and result.session.runs == []
    assert "handoff" in [t.name for t in provider.calls[0].tools]


async def test_a_bad_handoff_reason_or_tag_is_an_error_to_the_model() -> None:
    """An unknown reason or tag is refused: the model reads the error and answers instead."""
    settings = {"tools": {"handoff": True}, "escalation": True,
                "handoff": {"tags": ["vip"]}}
    script = [
        calls(("handoff", {"reason": "bored", "summary": "x"}),
              ("handoff", {"reason": "other", "summary": "x", "tag": "nope"})),
        said("Posso ajudar em algo mais?"),
    ]
    agent, provider = lifecycle_agent(script, settings)
    result = await agent.turn(message("oi", "m1"))
    errors = [json.loads(t)["error"] for t in tool_texts(provider.calls[1])]
    assert "reason must be one of" in errors[0] and "tag must be one of" in errors[1]
    assert result.turn_outcome == "answered" and result.messages[0].kind == "ai"


async def test_every_tool_reason_is_accepted() -> None:
    """user_requested, cannot_help, out_of_scope, sensitive and other all hand over."""
    for reason in ("user_requested", "cannot_help", "out_of_scope", "sensitive", "other"):
        script = [calls(("handoff", {"reason": reason, "summary": "s"}))]
        agent, _ = lifecycle_agent(script, {"tools": {"handoff": True}, "escalation": True,
                                            "handoff": {"message": "Transferindo."}})
        result = await agent.turn(message("oi", "m1"))
        assert result.messages[0].handoff is not None
        assert result.messages[0].handoff.reason == reason
        assert result.messages[0].text == "Transferindo."


async def test_an_agent_without_lifecycle_settings_never_hands_off() -> None:
    """The keyword means nothing to an agent that did not opt in: the turn is the engine's."""
    provider = MockProvider([said("Oi!")])
    agent = Agent(name="Ana", provider=provider, clock=FakeClock("2026-01-05T09:00:00Z"),
                  flows=[CHAT_FLOW])
    result = await agent.turn(message("atendente", "m1"))
    assert [m.kind for m in result.messages] == ["ai"]
    assert "lifecycle" not in result.session.metadata
    assert provider.calls[0].tools == []
