"""The model the benchmarks run against when no real one is wanted: the offline rule provider
behind a fixed delay per call, and the agent built on it (one model call a turn). A consumer
process loads the agent as ``AGENT=bench.harness.stand_in_model:bench_agent`` with the delay in
``BENCH_MODEL_LATENCY_MS``."""

from __future__ import annotations

import asyncio
import os
from typing import Any

__all__ = ["AGENT", "LATENCY_ENV", "LatencyProvider", "bench_agent", "calls_per_turn"]

LATENCY_ENV = "BENCH_MODEL_LATENCY_MS"
AGENT = "bench.harness.stand_in_model:bench_agent"
"""The ``AGENT`` setting of a consumer process that runs :func:`bench_agent`."""


class LatencyProvider:
    """The offline rule provider behind a fixed delay per call: a model with a known latency."""

    def __init__(self, latency_s: float) -> None:
        from engine import ProviderHooks
        from engine.providers.rules import RuleProvider

        self._inner = RuleProvider()
        self.hooks = ProviderHooks()  # the consumer counts and times calls as with any provider
        self._latency_s = latency_s
        self.calls = 0

    async def generate(self, request: Any) -> Any:
        from engine.providers.http import observed

        async def call() -> Any:
            if self._latency_s:
                await asyncio.sleep(self._latency_s)
            return await self._inner.generate(request)

        self.calls += 1
        return await observed(
            self.hooks, provider="bench", schema_name=request.schema_name, call=call
        )


def bench_agent(latency_ms: float | None = None) -> Any:
    """A message turn with one model call: count (code), a model-phrased reply, a one-hour
    wait (a timer on ``outbound.schedule``) — the save writes a reply and a timer, the shape
    the store benchmark saves. Latency from ``BENCH_MODEL_LATENCY_MS`` unless given."""
    from engine import Agent, ok

    if latency_ms is None:
        latency_ms = float(os.environ.get(LATENCY_ENV, "0"))

    async def count(ctx: Any) -> Any:
        return ok(data={"n": int(ctx.data.get("n") or 0) + 1})

    return Agent(
        name="Bancada",
        provider=LatencyProvider(latency_ms / 1000),
        fields={"n": {"type": "integer"}},
        actions={"count": count},
        flows=[{
            "id": "talk",
            "on": [{"message": []}],
            "steps": [
                {"id": "c", "do": "count"},
                {"id": "reply", "prompt": "Responda em uma frase."},
                {"id": "w", "wait": {"ms": 3_600_000}, "then": "end", "else": "c"},
            ],
        }],
    )


async def calls_per_turn() -> float:
    """Model calls one bench turn spends, measured on the agent itself."""
    agent = bench_agent(0)
    provider = agent.config.provider
    session: Any = None
    turns = 3
    for i in range(turns):
        request: dict[str, Any] = {"session_id": "probe", "message": f"oi {i}", "id": f"p{i}"}
        if session is not None:
            request["session"] = session
        result = await agent.turn(request)
        session = result.session
    return float(provider.calls) / turns
