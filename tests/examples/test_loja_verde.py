"""The lifecycle example agent (Loja Verde), run through the engine alone with its offline demo
provider: skills picked by the classifier, a web search with its footer, a newsletter goal."""

from __future__ import annotations

import asyncio

import pytest

from engine import Agent, FakeClock
from examples import loja_verde
from examples.loja_verde import LojaVerdeDemoProvider, build_agent
from tests.examples.host import Conversation, texts


@pytest.fixture
def conversa() -> Conversation:
    clock = FakeClock("2026-01-05T09:00:00Z")
    return Conversation(build_agent(LojaVerdeDemoProvider(), clock), clock)


def test_the_module_agent_is_built_offline() -> None:
    """`examples.loja_verde:agente` is an Agent with lifecycle settings; with no key set it
    talks through the offline demo provider."""
    assert isinstance(loja_verde.agente, Agent)
    assert loja_verde.agente.config.lifecycle is not None


async def test_a_plant_question_loads_the_skill_and_answers_from_the_web(
    conversa: Conversation,
) -> None:
    """The classifier picks cultivo; the reply quotes the shop's own guide with the web footer,
    a web source in provenance, and the turn costs 1 + 3 credits."""
    result = await conversa.say("como regar suculentas?")
    [reply] = result.messages
    assert reply.text.startswith("Regue suculentas a cada 10 dias")
    assert "Web:\n- Como regar suculentas: https://lojaverde.com.br/guias/suculentas" in reply.text
    assert {s.type for s in reply.provenance} == {"web"} and reply.agent_id == "loja-verde"
    assert result.credits == 4 and result.turn_outcome == "answered"
    assert ("skills-classified", "cultivo") in [(o.code, o.detail) for o in result.outcomes]


async def test_the_newsletter_goal_gathers_a_name_and_an_email(conversa: Conversation) -> None:
    """Asking for news activates the goal; the name and the e-mail are submitted as given and
    the goal completes with both."""
    first = await conversa.say("quero receber novidades")
    assert texts(first) == ["Para o cadastro, qual é o seu nome?"]
    second = await conversa.say("meu nome é Rita")
    assert texts(second) == ["Para o cadastro, qual é o seu email?"]
    done = await conversa.say("rita@example.com")
    assert texts(done) == ["Pronto! Você está na newsletter da Loja Verde."]
    assert done.turn_outcome == "goal_completed"
    assert done.goal_result is not None
    assert done.goal_result.outputs == {"nome": "Rita", "email": "rita@example.com"}


async def test_the_keyword_hands_over(conversa: Conversation) -> None:
    """'atendente' hands the conversation over before any model call."""
    result = await conversa.say("quero falar com um atendente")
    assert result.turn_outcome == "handoff" and result.llm_calls == 0


async def test_two_conversations_at_once_keep_their_own_goal_and_searches() -> None:
    """One customer signs up while another asks about plants, interleaved: neither sees the
    other's goal, answers or searches."""
    clock = FakeClock("2026-01-05T09:00:00Z")
    agent = build_agent(LojaVerdeDemoProvider(), clock)
    ana, bia = Conversation(agent, clock, "ana"), Conversation(agent, clock, "bia")
    await asyncio.gather(ana.say("quero receber novidades"), bia.say("como regar samambaias?"))
    a2, b2 = await asyncio.gather(ana.say("meu nome é Ana"), bia.say("e a adubação?"))
    assert texts(a2) == ["Para o cadastro, qual é o seu email?"]
    assert texts(b2)[0].startswith("Adube com composto orgânico")
    assert bia.session.metadata["lifecycle"]["goal"] is None
    assert ana.session.metadata["lifecycle"]["web_searches"] == 0
    assert bia.session.metadata["lifecycle"]["web_searches"] == 2
