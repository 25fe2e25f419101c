"""What the hosted lifecycle costs per turn, measured on the engine alone (no I/O).

    .venv/bin/python -m bench.lifecycle_bench [--turns 2000]

Prints microseconds per turn for the same one-call turn without and with lifecycle settings
(link check, language detection, sources), then with skills and web search offered too (the
classifier's model call is the same in-process echo as the reply's), and the cost of the pieces
on their own: an offline web search over 500 pages, the link
check of a 1 KB reply, language detection of one message, one in-memory knowledge search over
500 documents.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from engine import Agent, FakeClock, ModelRequest, ModelResponse
from engine.lifecycle.knowledge import InMemoryKnowledgeIndex, search_knowledge
from engine.lifecycle.language import Py3LangidDetector, detect
from engine.lifecycle.links import KnownLinks, check_links
from engine.lifecycle.settings import KnowledgeDocument
from engine.lifecycle.web_search import OfflineWebSearch

REPLY = ("Você pode trocar em https://www.lojaazul.com.br/troca ou ver https://lojaazul.com.br/x. "
         "Mais em https://www.google.com/search. ") * 6


PAGES = [{"title": f"Página {i}", "url": f"https://lojaazul.com.br/p{i}",
          "snippet": f"produto {i} garantia troca entrega"} for i in range(500)]


class Echo:
    async def generate(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(json={"message": REPLY})


def agent(lifecycle: dict[str, Any] | None) -> Agent:
    return Agent(name="Ana", provider=Echo(), clock=FakeClock(), lifecycle=lifecycle,
                 persona="Loja Azul: https://www.lojaazul.com.br/trocas",
                 flows=[{"id": "chat", "on": [{"message": []}],
                         "steps": [{"id": "t", "prompt": "Ajude."}]}])


async def per_turn(a: Agent, turns: int) -> float:
    await a.turn({"session_id": "warm-up", "message": "Olá", "id": "m"})  # loads, caches
    started = time.perf_counter()
    for i in range(turns):
        await a.turn({"session_id": f"s{i}", "message": "Olá, quero trocar meu pedido", "id": "m"})
    return (time.perf_counter() - started) / turns * 1e6


def per_call(fn: Any, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - started) / n * 1e6


async def main(turns: int) -> None:
    plain = await per_turn(agent(None), turns)
    full = await per_turn(agent({"link_check": True, "language": {"base_language": "pt"},
                                 "handoff": {"keywords": ["atendente"], "max_turns": 50}}),
                          turns)
    skilled = await per_turn(agent({
        "link_check": True, "language": {"base_language": "pt"},
        "skills": [{"name": "tom", "mode": "always_on", "text": "Fale com calma."},
                   *[{"name": f"s{i}", "description": f"assunto {i}", "text": "x " * 500,
                      "tool_allowlist": ["web_search"]} for i in range(5)]],
        "tools": {"web_search": True, "set_state": True},
        "web_search": {"backend": OfflineWebSearch(PAGES)},
    }), turns)
    known = KnownLinks.from_texts(["https://www.lojaazul.com.br/trocas"])
    detector = Py3LangidDetector()
    docs = [KnowledgeDocument(id=f"d{i}", title=f"Doc {i}", source=f"s{i % 8}",
                              text=f"produto {i} garantia troca entrega prazo " * 20)
            for i in range(500)]
    index = InMemoryKnowledgeIndex(docs)
    started = time.perf_counter()
    for _ in range(200):
        await search_knowledge(index, docs, "garantia da troca")
    search_us = (time.perf_counter() - started) / 200 * 1e6
    print(f"turn without lifecycle: {plain:9.0f} us")
    print(f"turn with lifecycle:    {full:9.0f} us  (link check, language, hand-off rules)")
    print(f"turn with skills:       {skilled:9.0f} us  (also 6 skills, the classifier call,"
          " web search offered)")
    web = OfflineWebSearch(PAGES)
    started = time.perf_counter()
    for _ in range(200):
        await web.search("garantia troca", limit=5, allowed_domains=["lojaazul.com.br"])
    print(f"offline web search, {len(PAGES)} pages: "
          f"{(time.perf_counter() - started) / 200 * 1e6:5.0f} us")
    print(f"link check, 1 KB reply: {per_call(lambda: check_links(REPLY, known), 2000):9.0f} us")
    print(f"language detection:     "
          f"{per_call(lambda: detect('Olá, quero trocar meu pedido', detector), 2000):9.0f} us")
    print(f"knowledge search, 500 docs: {search_us:5.0f} us")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=2000)
    asyncio.run(main(parser.parse_args().turns))
