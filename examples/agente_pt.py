"""Um segundo agente de exemplo, em português: a recepção de uma clínica odontológica.

Nomes de campos, fluxos e textos são dados do autor, em qualquer língua. Ele marca uma
avaliação:

- ``boas-vindas`` (mensagem sem pedido claro): cumprimenta e pergunta o nome, depois passa para
  ``agendamento``;
- ``agendamento``: coleta o período (``manhã`` ou ``tarde``, um enum) e o e-mail, reserva com uma
  ação idempotente em ``ctx.key`` e confirma;
- quem leva algumas mensagens para responder ainda é atendido, e um fluxo que desiste de um campo
  nunca mostra um valor vazio nem chama a ação sem ele (as etapas ``if`` abaixo);
- ``lembrete``: depois de ``TURNFLOW_DEMO_SILENCE_MS`` de silêncio (padrão 5 s), um lembrete, uma
  vez por conversa.

Use com ``turnflow dev --agent examples.agente_pt:agente``.
"""

from __future__ import annotations

import os
from typing import Any

from engine import Agent, Clock, ok, skipped
from engine.providers import Provider, provider_from_env

SILENCIO_MS = int(os.environ.get("TURNFLOW_DEMO_SILENCE_MS", "5000"))

PERIODOS = ["manhã", "tarde"]

TENTATIVAS = 5
"""Perguntas por campo do agendamento antes de desistir. Cada fala de uma etapa que coleta vários
campos conta uma pergunta de cada campo ainda em falta, e a resposta à última não é lida."""

# Reservas por chave de idempotência: a mesma etapa executada de novo não reserva duas vezes.
RESERVAS: dict[str, dict[str, Any]] = {}


def reservar(ctx: Any) -> Any:
    """Reserva a avaliação sob ``ctx.key``; sem período conhecido, não reserva."""
    periodo = ctx.with_.get("periodo")
    if periodo not in PERIODOS:
        return skipped("período desconhecido")
    RESERVAS.setdefault(ctx.key, {"periodo": periodo, "email": ctx.with_.get("email")})
    return ok()


CAMPOS: dict[str, dict[str, Any]] = {
    "nome": {"type": "string", "ask": "Pergunte o nome da pessoa, sem tom de formulário."},
    "periodo": {
        "type": "string",
        "enum": PERIODOS,
        "ask": "Pergunte se prefere de manhã ou à tarde.",
        "max_asks": TENTATIVAS,
    },
    "email": {
        "type": "email",
        "ask": "Peça um e-mail para enviar a confirmação.",
        "max_asks": TENTATIVAS,
    },
}

FLUXOS: list[dict[str, Any]] = [
    {
        "id": "boas-vindas",
        "name": "Boas-vindas",
        "on": [{"message": []}],
        "repeat": "once",
        "steps": [
            {"id": "ola", "say": "Olá! Aqui é a Ana, da Clínica Sorriso.", "once": True},
            {"id": "nome", "collect": ["nome"]},
            # Quem não diz o nome é cumprimentado sem ele.
            {"id": "tem_nome?", "if": {"known": "nome"}, "then": "seguir",
             "else": "seguir_sem_nome"},
            {"id": "seguir", "say": "Prazer, {{nome}}! Vamos marcar sua avaliação.",
             "then": {"flow": "agendamento"}},
            {"id": "seguir_sem_nome", "say": "Vamos marcar sua avaliação.",
             "then": {"flow": "agendamento"}},
        ],
    },
    {
        "id": "agendamento",
        "name": "Agendamento",
        "description": "A pessoa quer marcar uma consulta ou avaliação.",
        "on": [{"message": ["marcar consulta", "agendar", "avaliação", "horário", "marcar"]}],
        "steps": [
            {"id": "dados", "collect": ["periodo", "email"],
             "prompt": "Ajude a marcar a avaliação; pergunte só o que falta."},
            # A etapa desiste de um campo depois de max_asks: sem os dois, nada de reserva.
            {"id": "completo?", "if": {"known": ["periodo", "email"]}, "then": "reservar",
             "else": "depois"},
            {"id": "reservar", "do": "reservar",
             "with": {"periodo": "{{periodo}}", "email": "{{email}}"}},
            {"id": "confirmado",
             "say": "Pronto! Sua avaliação ficou para o período da {{periodo}}. "
             "A confirmação vai para {{email}}.",
             "then": "end"},
            {"id": "depois",
             "say": "Sem problema. Quando quiser, escreva \"marcar avaliação\" e seguimos "
             "daqui.",
             "then": "end"},
        ],
    },
    {
        "id": "lembrete",
        "name": "Lembrete após silêncio",
        "on": [{"silence": SILENCIO_MS}],
        "repeat": "once",
        "steps": [{"id": "lembrete", "say": "Ainda está por aí? Responda quando puder."}],
    },
]


def build_agent(provider: Provider | None = None, clock: Clock | None = None) -> Agent:
    """O agente; os testes passam o provedor offline e um relógio falso."""
    return Agent(
        name="Ana",
        persona="Recepcionista simpática de uma clínica odontológica. Frases curtas.",
        goal="Marcar avaliações e tirar dúvidas simples.",
        knowledge="A Clínica Sorriso atende de segunda a sexta, das 8h às 18h.",
        provider=provider if provider is not None else provider_from_env(),
        clock=clock,
        fields=CAMPOS,
        flows=FLUXOS,
        actions={"reservar": reservar},
    )


agente = build_agent()

__all__ = ["RESERVAS", "TENTATIVAS", "agente", "build_agent"]
