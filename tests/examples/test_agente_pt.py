"""The Portuguese example agent, run through the engine alone with the offline provider."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine import Agent, FakeClock
from engine.providers import RuleProvider
from examples import agente_pt
from examples.agente_pt import RESERVAS, build_agent
from tests.examples.host import Conversation, codes, texts


@pytest.fixture(autouse=True)
def _sem_reservas() -> Iterator[None]:
    RESERVAS.clear()
    yield
    RESERVAS.clear()


@pytest.fixture
def conversa() -> Conversation:
    clock = FakeClock("2026-01-05T09:00:00Z")
    return Conversation(build_agent(RuleProvider(), clock), clock)


def test_the_module_agent_is_built() -> None:
    """`examples.agente_pt:agente` is an Agent (its configuration passed validation)."""
    assert isinstance(agente_pt.agente, Agent)


async def test_booking_an_appointment_in_portuguese(conversa: Conversation) -> None:
    """Greeting, name, period (an enum) and e-mail lead to one reservation and a confirmation."""
    ola = await conversa.say("oi")
    assert texts(ola)[0] == "Olá! Aqui é a Ana, da Clínica Sorriso."
    nome = await conversa.say("meu nome é Joana")
    assert texts(nome)[-1] == "Prazer, Joana! Vamos marcar sua avaliação."
    await conversa.say("prefiro de manhã")
    assert conversa.session.data["periodo"] == "manhã"
    pronto = await conversa.say("joana@example.com")
    assert texts(pronto)[-1] == (
        "Pronto! Sua avaliação ficou para o período da manhã. "
        "A confirmação vai para joana@example.com."
    )
    assert ("reservar", "action-ok") in codes(pronto)
    assert list(RESERVAS.values()) == [{"periodo": "manhã", "email": "joana@example.com"}]


async def test_a_period_outside_the_enum_is_not_written(conversa: Conversation) -> None:
    """"À noite" is not one of the periods, so nothing is stored and the question stays open."""
    await conversa.say("quero marcar uma avaliação")
    await conversa.say("à noite")
    assert "periodo" not in conversa.session.data


async def test_silence_brings_one_reminder(conversa: Conversation) -> None:
    """After the assistant spoke, the reminder comes once after the configured silence."""
    await conversa.say("oi")
    fired = await conversa.wait(agente_pt.SILENCIO_MS / 1000)
    assert [texts(result) for _, result in fired] == [["Ainda está por aí? Responda quando puder."]]
    assert await conversa.wait(60) == []
