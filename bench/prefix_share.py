"""How much of each model prompt repeats the start of the one before it: the part a server's
prefix cache (llama.cpp's ``cache_prompt``, OpenAI's automatic caching, Anthropic's breakpoints)
could serve instead of evaluating again.

Run: ``python -m bench.prefix_share`` (or ``make bench-prefix``). The demo agent runs two
customer conversations of its own job (book a repair, ask the opening hours, pay) in-process
with the offline rule provider and a fake clock; every model request is rendered as the chat
text a server would evaluate, in two orders: the one the providers used before (the whole
system text, this turn's sections included, then the history; still the one without a prompt
cache asked for) and the one they send with one (``engine.providers.base.laid_out``: the
sections fixed for the agent, the history, this turn's sections before the customer's words).
For each call the longest common prefix, in characters, with an earlier call is:

- within a conversation: the previous call of that kind in the same conversation (what one
  llama.cpp slot, or one conversation's cache entries, could reuse);
- in call order (kind ``all``): the previous call of any kind in the same conversation, as
  one llama.cpp slot serving a conversation's calls in turn sees them;
- across conversations: the first call of each kind of the second conversation against the
  first's (what every conversation of one agent version could share).

Figures are shares of the prompt characters, so they do not depend on the host's speed.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable
from typing import Any

from engine import FakeClock, ModelRequest, ModelResponse
from engine.providers.openai import chat_completion_body
from engine.providers.rules import RuleProvider
from examples.demo_agent import build_agent
from tests.examples.host import CONVERSE_START, converse

CONVERSATIONS = {
    "c1": ["hi", "my name is Sam", "I need the brakes fixed on saturday", "yes",
           "what are your opening hours?", "thanks"],
    "c2": ["hello", "I'm Ada", "can you fix a flat tire on monday?", "yes",
           "when are you open?", "great"],
}


class Capturing:
    """Passes each call to the rule provider and keeps the request."""

    def __init__(self) -> None:
        self.inner = RuleProvider()
        self.requests: list[ModelRequest] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return await self.inner.generate(request)


def rendered(request: ModelRequest) -> str:
    """The prompt in the order the providers sent it before the cache layout
    (``TURNFLOW_MODEL_PROMPT_LAYOUT=built``): the whole system text first, then the history."""
    body = chat_completion_body(request, model="m", layout="built")
    return "\n".join(f"{m['role']}: {m['content']}" for m in body["messages"])


def rendered_for_caches(request: ModelRequest) -> str:
    """The prompt as the providers send it with a cache asked for (``laid_out``): the
    sections fixed for the agent as the system prompt, then the history, then this turn's
    sections as a system entry before the customer's words."""
    body = chat_completion_body(request, model="m", layout="cache")
    return "\n".join(f"{m['role']}: {m['content']}" for m in body["messages"])


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


async def conversation(session_id: str, texts: list[str]) -> list[ModelRequest]:
    provider = Capturing()
    agent = build_agent(provider=provider, clock=FakeClock(CONVERSE_START))

    def trace(text: str, result: Any) -> None:
        if os.environ.get("PREFIX_SHARE_TRACE"):
            print(f"  {session_id} you> {text} | " + " | ".join(m.text for m in result.messages))

    await converse(agent, session_id, texts, on_turn=trace)
    return provider.requests


def share(pairs: list[tuple[str, str]]) -> tuple[int, int]:
    """(characters in a common prefix with the earlier prompt, characters in all later ones)."""
    return (sum(common_prefix(a, b) for a, b in pairs), sum(len(b) for _, b in pairs))


async def main() -> None:
    runs = {sid: await conversation(sid, texts) for sid, texts in CONVERSATIONS.items()}
    print("| layout | call kind | calls | within a conversation: prefix share | "
          "across conversations: prefix share |")
    print("|---|---|---|---|---|")
    for layout, render in (("previous order", rendered), ("for caches", rendered_for_caches)):
        for kind in ("understand", "speak", "all"):
            row(runs, layout, render, kind)


def row(runs: dict[str, list[ModelRequest]], layout: str,
        render: Callable[[ModelRequest], str], kind: str) -> None:
    """One table row: the prefix shares of ``kind``'s prompts rendered by ``render``."""
    within: list[tuple[str, str]] = []
    firsts: list[str] = []
    calls = 0
    for requests in runs.values():
        prompts = [render(r) for r in requests if kind in ("all", r.schema_name)]
        calls += len(prompts)
        within += list(itertools.pairwise(prompts))
        if prompts:
            firsts.append(prompts[0])
    same, total = share(within)
    across_same, across_total = share(list(itertools.pairwise(firsts)))
    print(f"| {layout} | {kind} | {calls} | "
          f"{same / max(total, 1):.0%} ({same:,} of {total:,} chars) | "
          f"{across_same / max(across_total, 1):.0%} "
          f"({across_same:,} of {across_total:,} chars) |")


if __name__ == "__main__":
    asyncio.run(main())
