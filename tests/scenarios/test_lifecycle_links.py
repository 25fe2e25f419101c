"""Lifecycle step 6, the link check as the product states it: host names written plainly in the
persona and instructions are own domains, and a link reported as removed is never sent."""

from __future__ import annotations

import asyncio
from typing import Any

from engine import Agent, FakeClock, ModelResponse
from tests.scenarios.lifecycle_support import (
    CHAT_FLOW,
    START,
    calls,
    conversation,
    lifecycle_agent,
    message,
    said,
)
from tests.scenarios.support import codes

PERSONA = "Você atende a Loja Verde (lojaverde.com.br). Trocas: lojaverde.com.br/trocas."


async def test_a_host_name_written_plainly_in_the_persona_is_an_own_domain() -> None:
    """No https:// in the persona: an invented page on that host is still removed, its home
    page kept, other sites untouched."""
    text = ("A loja é https://lojaverde.com.br e a promoção está em "
            "https://lojaverde.com.br/promo-secreta hoje. Veja também https://exemplo.org/x.")
    agent, _ = lifecycle_agent([said(text)], {"link_check": True}, persona=PERSONA)
    result = await agent.turn(message("oi", "m1"))
    sent = result.messages[0].text
    assert "promo-secreta" not in sent
    assert "https://lojaverde.com.br " in sent and "https://exemplo.org/x" in sent
    assert [(f.action, f.url) for f in result.link_fixes] == [
        ("removed", "https://lojaverde.com.br/promo-secreta")]


async def test_a_host_name_in_the_instructions_is_an_own_domain() -> None:
    """Instructions that name a host plainly make its links checked."""
    agent, _ = lifecycle_agent(
        [said("Agende em https://agenda.clinica.com.br/inventado amanhã cedo, por favor.")],
        {"link_check": True},
        instructions=[{"must": "Agendamentos só por agenda.clinica.com.br."}],
    )
    result = await agent.turn(message("quero agendar", "m1"))
    assert "inventado" not in result.messages[0].text
    assert [f.action for f in result.link_fixes] == ["removed"]


async def test_a_reply_that_was_only_a_removed_link_sends_the_fallback() -> None:
    """Tidying leaves nothing: the removed link is not sent back; the fallback goes instead."""
    agent, _ = lifecycle_agent([said("Acesse: https://lojaverde.com.br/x")],
                               {"link_check": True, "fallback_message": "Pode repetir?"},
                               persona=PERSONA)
    result = await agent.turn(message("link?", "m1"))
    assert [m.text for m in result.messages] == ["Pode repetir?"]
    assert result.turn_outcome == "fallback" and result.credits == 0
    assert [f.action for f in result.link_fixes] == ["removed"]


async def test_without_a_fallback_nothing_is_sent_and_the_reply_is_retried() -> None:
    """Nothing left and no fallback message: no message at all, the engine's retry path."""
    agent, _ = lifecycle_agent([said("https://lojaverde.com.br/x")], {"link_check": True},
                               persona=PERSONA)
    result = await agent.turn(message("link?", "m1"))
    assert result.messages == [] and "deferred" in codes(result)
    assert result.turn_outcome == "error"


async def test_many_conversations_each_lose_only_their_own_invented_links() -> None:
    """Thirty conversations at once, each reply with its own invented and its own known link:
    each sent text keeps its known link, drops its invented one and reports only that."""

    class Linker:
        async def generate(self, request: Any) -> ModelResponse:
            await asyncio.sleep(0)
            sid = [m.text for m in request.messages if m.role == "user"][-1]
            return ModelResponse(json={"message": (
                f"Para {sid}: trocas em https://lojaverde.com.br/trocas e o seu cupom em "
                f"https://lojaverde.com.br/cupom-{sid} agora.")})

    agent = Agent(name="Ana", provider=Linker(), clock=FakeClock(START), flows=[CHAT_FLOW],
                  persona="Loja Verde. Trocas: https://lojaverde.com.br/trocas",
                  lifecycle={"link_check": True})
    ids = [f"s{i}" for i in range(30)]
    results = await asyncio.gather(*(agent.turn(conversation(sid, sid, f"{sid}-m1"))
                                     for sid in ids))
    for sid, result in zip(ids, results, strict=True):
        [sent] = result.messages
        assert sent.text.startswith(f"Para {sid}: trocas em https://lojaverde.com.br/trocas")
        assert "lojaverde.com.br/cupom" not in sent.text
        assert [(f.action, f.url) for f in result.link_fixes] == [
            ("removed", f"https://lojaverde.com.br/cupom-{sid}")]


async def test_the_words_sent_with_a_hand_off_are_checked_too() -> None:
    """The model's words given with the handoff tool become the hand-off message: an invented
    own link in them is removed and reported; if nothing is left the configured message goes."""
    words = ("Vou te passar para a equipe; acompanhe em https://lojaverde.com.br/chamado-999 "
             "a qualquer momento.")
    script = [calls(("handoff", {"reason": "cannot_help", "summary": "s"}),
                    text=f'{{"message": "{words}"}}')]
    settings = {"link_check": True, "tools": {"handoff": True}, "escalation": True,
                "handoff": {"message": "Vou chamar uma pessoa."}}
    agent, _ = lifecycle_agent(script, settings, persona=PERSONA)
    result = await agent.turn(message("socorro", "m1"))
    [sent] = result.messages
    assert sent.kind == "handoff" and "chamado-999" not in sent.text
    assert sent.text.startswith("Vou te passar para a equipe")
    assert [f.action for f in result.link_fixes] == ["removed"]
    only_link = [calls(("handoff", {"reason": "other", "summary": "s"}),
                       text='{"message": "https://lojaverde.com.br/x"}')]
    agent, _ = lifecycle_agent(only_link, settings, persona=PERSONA)
    result = await agent.turn(message("socorro", "m1"))
    assert [m.text for m in result.messages] == ["Vou chamar uma pessoa."]
