"""turnflow's side of ``make bench-peers``: the demo agent, through its OpenAI-compatible
provider pointed at the scripted server, over every conversation of ``conversations.py``.

Each conversation runs as a host runs it: one ``agent.turn`` per customer message, with the
history so far and the session the previous turn returned. The demo takes its payment as the
host's ``paid`` event (a payment webhook), not from the customer's words, so a ``pay`` turn is
the customer's message and then that event; both count toward the turn.

    python -m bench.peers.run_turnflow --base-url http://127.0.0.1:PORT/v1 --out rows.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.peers.conversations import CONVERSATIONS
from bench.peers.timing import Timings, tag
from engine import FakeClock
from engine.providers.openai import (
    PROMPT_CACHES,
    PROMPT_LAYOUTS,
    OpenAIProvider,
    PromptCache,
    PromptLayout,
)
from examples.demo_agent import build_agent

__all__ = ["run"]

FRAMEWORK = "turnflow"
START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


async def conversation(base_url: str, timings: Timings, cid: str,
                       provider: OpenAIProvider, framework: str = FRAMEWORK,
                       real: bool = False) -> list[str]:
    """Run one conversation; its replies, in order. On a ``real`` model a turn that raises
    (a reply the engine cannot use where it has no fallback, such as the idle speaker's) is
    recorded with its error, as a host would log it, and the conversation goes on from the
    session before it."""
    clock = FakeClock(START)
    agent = build_agent(provider=provider, clock=clock)
    history: list[dict[str, Any]] = []
    session: Any = None
    said: list[str] = []
    for index, turn in enumerate(CONVERSATIONS[cid]):
        tag(base_url, framework, cid, index)
        with timings.turn(cid, index, kind=turn.kind) as row:
            inputs: list[dict[str, Any]] = [{"message": turn.text, "id": f"{cid}-{index}"}]
            if turn.kind == "pay":
                inputs.append({"event": "paid", "payload": {}, "key": f"{cid}-paid-{index}"})
            replies: list[str] = []
            actions: list[dict[str, Any]] = []
            for given in inputs:
                request: dict[str, Any] = {"session_id": cid, **given, "history": list(history)}
                if session is not None:
                    request["session"] = session
                try:
                    result = await agent.turn(request)
                except Exception as exc:  # a real model's bad turn: recorded, the chat goes on
                    if not real:
                        raise
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    continue
                session = result.session
                replies += [m.text for m in result.messages if m.text]
                # What the agent's code did: a booking its action made, a payment its wait
                # for the host's ``paid`` event took (the run reached its "paid" step).
                data = result.session.data
                actions += [{"action": "book", "service": data.get("service"),
                             "day": data.get("day"), "ref": data.get("booking_ref")}
                            for o in result.outcomes
                            if o.code == "action-ok" and o.step_id == "book"]
                if any(m.step_id == "paid" for m in result.messages):
                    actions.append({"action": "pay",
                                    "ref": result.session.data.get("booking_ref")})
            row["replies"] = replies
            row["actions"] = actions
        at = START + timedelta(minutes=index)
        history.append({"role": "user", "text": turn.text, "at": at})
        history += [{"role": "assistant", "text": text, "at": at} for text in replies]
        said += replies
    return said


async def run(base_url: str, out: Path, *, framework: str = FRAMEWORK,
              prompt_cache: PromptCache = "off", conversations: list[str] | None = None,
              model: str = "scripted", call_timeout: float = 60.0,
              slots: int = 0, layout: PromptLayout | None = None) -> dict[str, list[str]]:
    """Every conversation, one after another; the replies of each. ``prompt_cache`` is the
    provider's (``TURNFLOW_MODEL_PROMPT_CACHE``): other than ``off``, the prompt is laid out for
    a prefix cache. ``slots`` is ``TURNFLOW_MODEL_SLOTS``: with a llama.cpp server's slot count
    (two or more), understand and speak calls each keep a slot, so each finds its own prefix.
    ``layout`` is ``TURNFLOW_MODEL_PROMPT_LAYOUT`` (None: the provider's default)."""
    timings = Timings(out, framework)
    provider = OpenAIProvider(api_key="", base_url=base_url, model=model,
                              prompt_cache=prompt_cache, timeout=call_timeout, slots=slots,
                              layout=layout)
    replies = {}
    try:
        for cid in conversations or list(CONVERSATIONS):
            replies[cid] = await conversation(base_url, timings, cid, provider, framework,
                                              real=model != "scripted")
    finally:
        await provider.aclose()
    return replies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--framework", default=FRAMEWORK, help="the name its rows carry")
    parser.add_argument("--prompt-cache", choices=PROMPT_CACHES, default="off")
    parser.add_argument("--conversations", default="", help="a subset, comma-separated")
    parser.add_argument("--model", default="scripted")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a call may take")
    parser.add_argument("--slots", type=int, default=0,
                        help="the llama.cpp server's slots (TURNFLOW_MODEL_SLOTS); 0: the "
                        "server picks")
    parser.add_argument("--prompt-layout", choices=PROMPT_LAYOUTS, default=None,
                        help="TURNFLOW_MODEL_PROMPT_LAYOUT; unset: the provider's default")
    args = parser.parse_args()
    chosen = [c for c in args.conversations.split(",") if c] or None
    unknown = [c for c in chosen or [] if c not in CONVERSATIONS]
    if unknown:
        parser.error(f"no conversation {', '.join(unknown)}")
    replies = asyncio.run(run(args.base_url, args.out, framework=args.framework,
                              prompt_cache=args.prompt_cache, conversations=chosen,
                              model=args.model, call_timeout=args.timeout,
                              slots=args.slots, layout=args.prompt_layout))
    for cid, said in replies.items():
        print(f"{args.framework} {cid}: " + " | ".join(said), flush=True)


if __name__ == "__main__":
    main()
