"""Versions benchmark: what holding one to five versions of one agent at once costs a consumer.

A consumer serves a conversation on the version its runs started on (``consumer.hosting.pinning``),
so after activations it holds several versions of one agent at once. Each scenario routes the
same traffic (``--turns`` messages over ``--conversations`` conversations, round robin) through
the consumer's ``RegistryRouter`` and the engine, with K versions in play: conversation ``c``
starts while version ``c mod K + 1`` is live (its runs pin it there), then the last version is
activated and every later turn of a conversation with a run in progress runs on its pinned
version. The agent is the demo bike shop stored as data (``examples/agents/demo.json``), each
version with its own persona; the provider is the offline rule provider (zero latency); the
registry is held in memory (the query costs are those of ``hosting_bench.py``), so the figures
are the router's and the engine's own. Reported per K, side by side with K = 1 in one run: the
memory the built agents hold (tracemalloc, after a collection), the share of turns that ran
pinned, and turns/s (median of ``--rounds``).

    python -m bench.versions_bench [--turns 3000] [--conversations 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import statistics
import time
import tracemalloc
from datetime import UTC, datetime
from typing import Any

from bench.harness import REPO
from consumer.hosting.routing import BINDING_KEY, RegistryRouter
from consumer.turns.parser import ParsedInput
from engine.packs import PackSet
from engine.providers import RuleProvider
from examples.demo_pack import pack
from store.hosting import AgentVersion, LiveAgent

DEMO = json.loads((REPO / "examples/agents/demo.json").read_text())
MESSAGES = ["hi, I'm Rui", "book a repair", "brakes", "saturday", "yes", "thanks",
            "what are your opening hours?"]
AGENT = "shop"


class MemoryRegistry:
    """The registry's reads the router makes, from memory: one agent with ``versions``
    versions, ``live`` settable."""

    def __init__(self, versions: int) -> None:
        self.documents = {}
        for version in range(1, versions + 1):
            document = copy.deepcopy(DEMO)
            document["agent_id"], document["workspace"] = AGENT, "ws"
            document["persona"] = f"Front desk of the bike shop, version {version}."
            self.documents[version] = document
        self.live_version = 1

    async def live(self, agent_ids: Any) -> dict[str, LiveAgent]:
        return {AGENT: LiveAgent(AGENT, "ws", self.live_version)}

    async def changes_since(self, since: Any) -> tuple[datetime, list[LiveAgent], list[Any]]:
        return datetime.now(UTC), [LiveAgent(AGENT, "ws", self.live_version)], []

    async def version(self, agent_id: str, version: int | None = None) -> AgentVersion:
        chosen = self.live_version if version is None else version
        return AgentVersion(AGENT, "ws", chosen, self.documents[chosen], "", False)

    async def workspace(self, workspace: str) -> None:
        return None


async def _scenario(versions: int, options: argparse.Namespace) -> dict[str, Any]:
    registry = MemoryRegistry(versions)
    router = RegistryRouter(registry, PackSet([pack]), provider=RuleProvider(),  # type: ignore[arg-type]
                            cache_size=256, refresh_s=0)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for version in range(1, versions + 1):
        registry.live_version = version
        await router.route(ParsedInput("warm", "message", {}, "w", AGENT), None)
    gc.collect()
    held = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    sessions: dict[str, Any] = {}
    pinned = 0
    started = time.perf_counter()
    for turn in range(options.turns):
        conversation = turn % options.conversations
        if turn < options.conversations:  # each conversation starts on "its" live version
            registry.live_version = conversation % versions + 1
        elif turn == options.conversations:
            registry.live_version = versions
        session_id = f"c{conversation}"
        text = MESSAGES[(turn // options.conversations) % len(MESSAGES)]
        state = sessions.get(session_id)
        route = await router.route(
            ParsedInput(session_id, "message", {}, f"m{turn}", AGENT), state
        )
        if turn >= options.conversations and route.role == "pinned":
            pinned += 1
        result = await route.agent.turn({"session_id": session_id, "message": text,
                                         "id": f"m{turn}", "session": state})
        saved = result.session.model_dump(mode="json")
        saved["metadata"][BINDING_KEY] = route.binding  # as the pipeline saves it
        sessions[session_id] = saved
    elapsed = time.perf_counter() - started
    return {"versions": versions, "built": router.cached_agents, "held_mb": held / 1e6,
            "turns_per_s": options.turns / elapsed,
            "pinned_share": pinned / max(1, options.turns - options.conversations)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    asyncio.run(_scenario(1, options))  # warm-up (imports, first builds): not reported
    # Rounds interleave the scenarios (1..5, 1..5, ...) so a busy moment of a shared host
    # falls on all of them alike rather than on one.
    runs: dict[int, list[dict[str, Any]]] = {versions: [] for versions in range(1, 6)}
    for _ in range(options.rounds):
        for versions in runs:
            runs[versions].append(asyncio.run(_scenario(versions, options)))
    rows = [{**found[0],
             "held_mb": statistics.median(r["held_mb"] for r in found),
             "turns_per_s": statistics.median(r["turns_per_s"] for r in found)}
            for found in runs.values()]
    base = rows[0]
    print(f"{options.turns} turns over {options.conversations} conversations, "
          f"median of {options.rounds} rounds")
    print("versions  built  held MB  x K=1  pinned turns  turns/s  x K=1")
    for row in rows:
        print(f"{row['versions']:>8}  {row['built']:>5}  {row['held_mb']:>7.2f}  "
              f"{row['held_mb'] / base['held_mb']:>5.2f}  {row['pinned_share']:>12.0%}  "
              f"{row['turns_per_s']:>7.0f}  {row['turns_per_s'] / base['turns_per_s']:>5.2f}")


if __name__ == "__main__":
    main()
