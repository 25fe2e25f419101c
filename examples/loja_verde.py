"""A hosted-lifecycle agent: the Loja Verde garden shop, with skills, a goal and web search.

Everything here runs offline. The agent has no flows: its idle speaker answers, with the
lifecycle on top (``Agent(lifecycle=...)``):

- skills: ``tom`` (always on: the shop's tone and its site), ``cultivo`` (picked by the skill
  classifier for plant-care questions; it allows only ``web_search`` and ``set_state``) and
  ``novidades`` (the newsletter sign-up, whose goal gathers a name and an e-mail);
- web search over ``OfflineWebSearch``: a few pages of the shop's own site and of a public
  gardening guide, limited to those two domains, 3 searches per conversation;
- the hand-off keyword "atendente", the link check, a fallback message.

With no model key set the agent talks through ``LojaVerdeDemoProvider``: the offline
``RuleProvider`` plus a few word rules that call the lifecycle's tools (a question -> web search;
a message with a name or an e-mail while the sign-up goal is active -> submit the answers,
then complete the goal). It is a demo aid: a real model decides these by itself. With a key
set, ``provider_from_env()`` gives the real model and the rules are not used.

    make run ARGS="--agent examples.loja_verde:agente"

Try: "como regar suculentas?", "quero receber novidades", "meu nome é Rita",
"rita@example.com", "quero falar com um atendente".
"""

from __future__ import annotations

import json
from typing import Any

from engine import Agent, Clock, ModelRequest, ModelResponse, ToolCall
from engine.lifecycle.web_search import OfflineWebSearch
from engine.providers import Provider, RuleProvider, provider_from_env
from engine.providers.rules import extract_value

PAGES = [
    {"title": "Como regar suculentas", "url": "https://lojaverde.com.br/guias/suculentas",
     "snippet": "Regue suculentas a cada 10 dias, só com a terra seca; vaso com furo."},
    {"title": "Rega de samambaias", "url": "https://lojaverde.com.br/guias/samambaias",
     "snippet": "Samambaias gostam de rega frequente e sombra; borrife as folhas."},
    {"title": "Adubação orgânica", "url": "https://www.embrapa.br/hortalicas/adubacao",
     "snippet": "Adube com composto orgânico a cada 2 meses; regue depois de adubar."},
    {"title": "Pragas comuns em hortas", "url": "https://www.embrapa.br/hortalicas/pragas",
     "snippet": "Pulgões e cochonilhas: como identificar e controlar sem veneno."},
]

SKILLS: list[dict[str, Any]] = [
    {"name": "tom", "mode": "always_on",
     "text": "Fale como a Loja Verde (lojaverde.com.br): frases curtas, tom gentil, você."},
    {"name": "cultivo", "mode": "model_selected",
     "description": "cuidados com plantas rega adubo pragas suculentas samambaias",
     "text": "Para dúvidas de cultivo, busque na web e cite a fonte. Guias em "
             "https://lojaverde.com.br/guias",
     "tool_allowlist": ["web_search", "set_state"]},
    {"name": "novidades", "mode": "model_selected",
     "description": "receber novidades newsletter cadastro promoções",
     "text": "Cadastre a pessoa na newsletter: nome e e-mail.",
     "goal": {"description": "Cadastrar na newsletter da Loja Verde.",
              "fields": {"nome": {"type": "string", "description": "o primeiro nome"},
                         "email": {"type": "email"}}}},
]

LIFECYCLE: dict[str, Any] = {
    "agent_id": "loja-verde",
    "skills": SKILLS,
    "tools": {"web_search": True, "handoff": True, "set_state": True},
    "escalation": True,  # the handoff tool is offered, and a gated turn is handed over
    "web_search": {"backend": OfflineWebSearch(PAGES),
                   "allowed_domains": ["lojaverde.com.br", "embrapa.br"]},
    "handoff": {"keywords": ["atendente"], "message": "Vou chamar uma pessoa da equipe."},
    "language": {"strategy": "fixed", "base_language": "pt"},
    "link_check": True,
    "fallback_message": "Desculpe, não consegui responder agora. Pode repetir?",
}

GREETING = "Olá! Sou a Flora, da Loja Verde. Posso ajudar com plantas ou com as novidades da loja."
_QUESTION_WORDS = ("como", "qual", "quando", "onde", "quanto", "por que", "o que")
_NAME_WORDS = ("nome", "chamo", "sou")


class LojaVerdeDemoProvider(RuleProvider):
    """The offline provider plus word rules that use the lifecycle's tools (a demo aid)."""

    description = "offline RuleProvider with Loja Verde's tool rules (a demo aid, not a model)"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        if request.schema_name == "speak" and request.tools:
            return self._with_tools(request)
        if request.schema_name == "speak":
            return self._after_tools(request)
        return await super().generate(request)

    def _with_tools(self, request: ModelRequest) -> ModelResponse:
        offered = {tool.name for tool in request.tools}
        message = str(request.meta.get("message") or "")
        results = _tool_results(request)
        goal = request.meta.get("goal")
        if not results and goal and "submit_goal_fields" in offered:
            answers = _goal_answers(goal, message)
            if answers:
                return _call("submit_goal_fields", {"answers": answers})
        if results and "complete_goal" in offered and results[-1].get("missing") == []:
            return _call("complete_goal", {})
        lowered = message.lower()
        asks = "?" in message or lowered.startswith(_QUESTION_WORDS)
        if not results and "web_search" in offered and asks:
            return _call("web_search", {"query": message})
        return self._after_tools(request)

    def _after_tools(self, request: ModelRequest) -> ModelResponse:
        results = _tool_results(request)
        last = results[-1] if results else {}
        goal = request.meta.get("goal") or {}
        if last.get("completed"):
            text = "Pronto! Você está na newsletter da Loja Verde."
        elif last.get("results"):
            top = last["results"][0]
            text = f"{top['snippet']} (fonte: {top['title']})"
        elif "results" in last:
            text = "Não encontrei nada sobre isso nos guias."
        elif goal.get("fields"):
            missing = [n for n in goal["fields"] if n not in (goal.get("answers") or {})]
            missing = last.get("missing", missing)
            text = f"Para o cadastro, qual é o seu {missing[0]}?" if missing else "Obrigada!"
        else:
            text = GREETING
        return ModelResponse(json={"message": text})


def _tool_results(request: ModelRequest) -> list[dict[str, Any]]:
    out = []
    for message in request.messages:
        if message.role == "tool":
            try:
                value = json.loads(message.text)
            except ValueError:
                continue
            out.append(value if isinstance(value, dict) else {})
    return out


def _goal_answers(goal: dict[str, Any], message: str) -> dict[str, Any]:
    answers: dict[str, Any] = {}
    known = goal.get("answers") or {}
    for name, spec in (goal.get("fields") or {}).items():
        if name in known:
            continue
        if name == "nome":
            words = message.replace(",", " ").split()
            for index, word in enumerate(words[:-1]):
                if word.lower() in ("é", *_NAME_WORDS) and words[index + 1][:1].isupper():
                    answers[name] = words[index + 1]
            continue
        value = extract_value(spec, message, name=name)
        if value is not None:
            answers[name] = value
    return answers


def _call(name: str, arguments: dict[str, Any]) -> ModelResponse:
    return ModelResponse(tool_calls=[ToolCall(id=f"{name}-1", name=name, arguments=arguments)])


def build_agent(provider: Provider | None = None, clock: Clock | None = None) -> Agent:
    """The agent; without a model key, the offline demo provider above."""
    chosen = provider if provider is not None else provider_from_env()
    if isinstance(chosen, RuleProvider) and not isinstance(chosen, LojaVerdeDemoProvider):
        chosen = LojaVerdeDemoProvider()
    return Agent(
        name="Flora",
        persona="Atendente da Loja Verde, uma loja de plantas e jardinagem (lojaverde.com.br).",
        provider=chosen,
        clock=clock,
        idle="Ajude com plantas, pedidos e as novidades da loja; pergunte o que a pessoa precisa.",
        lifecycle=LIFECYCLE,
    )


agente = build_agent()

__all__ = ["LIFECYCLE", "LojaVerdeDemoProvider", "agente", "build_agent"]
