"""Hosting benchmark: one agent against 1,000 distinct agents over the same traffic, and the
cost of activating a new version under load.

Every scenario runs the same inputs (``--turns`` messages over ``--conversations``
conversations, round robin) through the consumer's ``RegistryRouter`` and the engine, in a
fresh process (so its memory figure is its own): route (the registry's live version, cached
for ``--refresh-ms``; the built agent from the LRU cache) then ``agent.turn`` with the
conversation's session, as the consumer passes it. The agents are the demo bike shop stored as
data (``examples/agents/demo.json``), each with its own id and persona; the provider is the
offline rule provider (zero latency), so the figures are the service's own cost. No Kafka,
no save: those are the same whichever agent answers (see ``pipeline_bench.py``).

- ``1 agent``: every conversation names the same agent;
- ``1,000 agents, cache N``: conversation ``c`` names agent ``c mod 1000``; with the default
  cache (256) most turns of a conversation find its agent evicted and build it again; with a
  cache of 1,000 every agent is built once;
- ``version switch``: the one-agent traffic, with a new version activated half way; the turns
  after it pay one build and the next live-version read; reported: turns/s over the run, the
  worst turn, the time from the activation to the first turn on the new version and how many
  turns the old version answered meanwhile (the live version is re-read every 200 ms here).

    python -m bench.hosting_bench [--turns 3000] [--conversations 1000] [--agents 1000]
                                  [--rounds 3]

Uses DATABASE_URL (a scratch database is created there and dropped), else an embedded
PostgreSQL started for the run.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from typing import Any

from bench.harness import REPO
from bench.harness.databases import scratch_database
from bench.harness.percentiles import percentile
from consumer.hosting.routing import RegistryRouter
from consumer.turns.parser import ParsedInput
from engine.definition import definition_digest
from engine.packs import PackSet
from engine.providers import RuleProvider
from examples.demo_pack import pack
from store import Store
from store.hosting import Hosting

DEMO = json.loads((REPO / "examples/agents/demo.json").read_text())
MESSAGES = ["hi, I'm Rui", "what are your opening hours?", "book a repair", "brakes",
            "saturday", "yes", "thanks"]


def _document(index: int, version: int = 1) -> dict[str, Any]:
    document = copy.deepcopy(DEMO)
    document["agent_id"] = f"shop-{index}"
    document["workspace"] = f"ws-{index % 100}"
    document["persona"] = f"Front desk of bike shop number {index}, version {version}."
    return document


async def _put(url: str, agents: int) -> None:
    store = await Store.connect(url, pool_size=4, max_overflow=0)
    try:
        hosting = Hosting(store.engine)
        for index in range(agents):
            document = _document(index)
            await hosting.put_version(
                agent_id=document["agent_id"], workspace=document["workspace"],
                document=document, digest=definition_digest(document), activate=True,
            )
    finally:
        await store.close()


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


async def _scenario(url: str, options: argparse.Namespace) -> dict[str, Any]:
    store = await Store.connect(url, pool_size=2, max_overflow=0)
    hosting = Hosting(store.engine)
    router = RegistryRouter(
        hosting, PackSet([pack]), provider=RuleProvider(), cache_size=options.cache,
        refresh_s=options.refresh_ms / 1000,
    )
    sessions: dict[str, Any] = {}
    latencies: list[float] = []
    switch_at = options.turns // 2 if options.switch else None
    switched_at: float | None = None
    first_new_ms: float | None = None
    stale = 0  # turns after the activation still answered by the old version
    if switch_at is not None:  # every round starts from version 1 live
        await hosting.activate("shop-0", 1)
    rss_before = _rss_mb()
    started = time.perf_counter()
    try:
        for turn in range(options.turns):
            if turn == switch_at:
                document = _document(0, version=2)
                await hosting.put_version(
                    agent_id="shop-0", workspace=document["workspace"], document=document,
                    digest=definition_digest(document), activate=True,
                )
                switched_at = time.perf_counter()
            conversation = turn % options.conversations
            session_id = f"c{conversation}"
            agent_id = f"shop-{conversation % options.agents}"
            text = MESSAGES[(turn // options.conversations) % len(MESSAGES)]
            parsed = ParsedInput(session_id, "message", {}, input_id=f"m{turn}",
                                 agent_id=agent_id)
            t0 = time.perf_counter()
            route = await router.route(parsed, sessions.get(session_id))
            result = await route.agent.turn({
                "session_id": session_id, "message": text, "id": f"m{turn}",
                "session": sessions.get(session_id),
            })
            latencies.append(time.perf_counter() - t0)
            sessions[session_id] = result.session.model_dump(mode="json")
            if switched_at is not None and route.version == 1:
                stale += 1
            elif switched_at is not None and first_new_ms is None:
                first_new_ms = (time.perf_counter() - switched_at) * 1e3
        elapsed = time.perf_counter() - started
    finally:
        await store.close()
    second_half = latencies[len(latencies) // 2:]
    return {
        "turns_per_s": options.turns / elapsed,
        "steady_per_s": len(second_half) / sum(second_half),
        "median_us": statistics.median(latencies) * 1e6,
        "p99_us": percentile(latencies, 0.99) * 1e6,
        "max_ms": max(latencies) * 1e3,
        "rss_mb": _rss_mb() - rss_before,
        "builds": router.builds,
        "cached": router.cached_agents,
        "first_new_ms": first_new_ms,
        "stale": stale,
    }


def _run(url: str, options: argparse.Namespace, **changes: Any) -> dict[str, Any]:
    """One scenario in a fresh process, so its memory figure is its own."""
    argv = [sys.executable, __file__, "--scenario", url, "--turns", str(options.turns),
            "--conversations", str(options.conversations), "--refresh-ms",
            str(options.refresh_ms)]
    for name, value in changes.items():
        if value is True:
            argv.append(f"--{name}")
        else:
            argv += [f"--{name}", str(value)]
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _median(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the rounds (None stays None)."""
    out: dict[str, Any] = {}
    for key in results[0]:
        values = [r[key] for r in results if r[key] is not None]
        out[key] = statistics.median(values) if values else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--cache", type=int, default=256)
    parser.add_argument("--refresh-ms", type=int, default=1000)
    parser.add_argument("--switch", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scenario", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.scenario:
        print(json.dumps(asyncio.run(_scenario(options.scenario, options))))
        return

    with ExitStack() as stack:
        database = scratch_database(stack, prefix="turnflow-hosting-bench")
        started = time.perf_counter()
        asyncio.run(_put(database.url, options.agents))
        print(f"server: {database.where}; {options.agents} agents stored in "
              f"{time.perf_counter() - started:.1f}s; {options.turns} turns over "
              f"{options.conversations} conversations; {os.cpu_count()} CPUs, load "
              f"{os.getloadavg()[0]:.1f}; median of {options.rounds} rounds")
        scenarios: list[tuple[str, dict[str, Any]]] = [
            ("1 agent", {"agents": 1, "cache": 256}),
            (f"{options.agents:,} agents, cache 256", {"agents": options.agents, "cache": 256}),
            (f"{options.agents:,} agents, cache {options.agents:,}",
             {"agents": options.agents, "cache": options.agents}),
            ("1 agent, version switch half way (refresh 200 ms)",
             {"agents": 1, "cache": 256, "switch": True, "refresh-ms": 200}),
        ]
        # The machine may be shared: the scenarios run in turns, ``--rounds`` times, and each
        # figure is the median over the rounds, so a burst of outside load hits them alike.
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in scenarios}
        for _ in range(options.rounds):
            for name, changes in scenarios:
                runs[name].append(_run(database.url, options, **changes))
        rows = [(name, _median(runs[name])) for name, _ in scenarios]
        base = rows[0][1]
        print(f"{'scenario':<50} {'turns/s':>8} {'x base':>6} {'2nd half':>8} {'x base':>6}"
              f" {'median us':>9} {'p99 us':>7} {'max ms':>7} {'RSS +MB':>7} {'builds':>6}"
              f" {'new after':>9}")
        for name, row in rows:
            new = "" if row["first_new_ms"] is None else (
                f"{row['first_new_ms']:.0f} ms/{row['stale']:.0f}"
            )
            print(f"{name:<50} {row['turns_per_s']:>8.0f} "
                  f"{row['turns_per_s'] / base['turns_per_s']:>6.2f} "
                  f"{row['steady_per_s']:>8.0f} "
                  f"{row['steady_per_s'] / base['steady_per_s']:>6.2f} {row['median_us']:>9.0f}"
                  f" {row['p99_us']:>7.0f} {row['max_ms']:>7.1f} {row['rss_mb']:>7.1f}"
                  f" {row['builds']:>6.0f} {new:>9}")
        print("2nd half: turns/s of the turns' own time over the second half of the run (every "
              "agent built once by then, when the cache holds them all)")
        print("new after: from the activation to the first turn on the new version / turns "
              "the old version still answered meanwhile")


if __name__ == "__main__":
    main()
