"""Model connection pool benchmark: bursts of calls at once through the OpenAI provider to the
stand-in model server, and how many connections the server accepted per call.

Each round starts ``--at-once`` calls together and waits for all of them; ``--rounds`` rounds
per pool, the pools alternating (``--pairs`` times) on the same server:

- ``httpx-default``: the provider on a client with httpx's default pool (100 connections, 20 of
  them kept alive);
- ``one-pool``: one pool keeping alive as many connections as it opens (``--at-once``);
- ``provider``: the provider's own client (``ShardedTransport``, sized by ``connections``).

The server (``tests/fixtures/stand_in_model.py``, its own process) answers after
``--latency-ms`` and keeps connections alive, then, in a second pass, closes each after one
reply. Figures: connections accepted per call, the wall time of all rounds, the calls' p50 and
p99. They are ratios of one run on one host; the client and the server share its cores.

    python -m bench.model_pool_bench [--at-once 64] [--rounds 5] [--pairs 2] [--latency-ms 200]
    make bench-model-pool ARGS="..."
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import httpx

from bench.harness.percentiles import percentile
from bench.harness.ports import free_port
from engine.providers import OpenAIProvider
from engine.providers.base import ChatMessage, ModelRequest
from tests.fixtures.stand_in_model import StandInModel

POOLS = ("httpx-default", "one-pool", "provider")
SCHEMA = {"type": "object", "properties": {"message": {"type": "string"}},
          "required": ["message"], "additionalProperties": False}


def _request(i: int) -> ModelRequest:
    return ModelRequest(schema_name="speak", system="You are Ana.",
                        messages=[ChatMessage(role="user", text=f"customer {i}")],
                        json_schema=SCHEMA)


def _accepted(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


async def _run(pool: str, base_url: str, log: Path, args: argparse.Namespace) -> str:
    before = _accepted(log)
    client = None
    if pool == "httpx-default":
        client = httpx.AsyncClient(timeout=60)
    elif pool == "one-pool":
        n = args.at_once
        client = httpx.AsyncClient(timeout=60, limits=httpx.Limits(
            max_connections=n, max_keepalive_connections=n))
    provider = OpenAIProvider("", model="m", base_url=base_url, client=client)
    latencies: list[float] = []

    async def one(i: int) -> None:
        start = time.perf_counter()
        reply = await provider.generate(_request(i))
        latencies.append(time.perf_counter() - start)
        if (reply.json_ or {}).get("message") != f"echo: customer {i}":
            raise AssertionError(f"call {i} got another call's reply: {reply.json_}")

    started = time.perf_counter()
    for _ in range(args.rounds):
        await asyncio.gather(*(one(i) for i in range(args.at_once)))
    wall = time.perf_counter() - started
    await provider.aclose()
    if client is not None:
        await client.aclose()
    await asyncio.sleep(0.2)  # the server logs a connection as it accepts it
    opened = _accepted(log) - before
    calls = args.at_once * args.rounds
    return (f"{pool:14s} {calls:6d} {opened:6d} {opened / calls:9.2f} {wall:8.2f} "
            f"{percentile(latencies, 0.5) * 1000:7.0f} "
            f"{percentile(latencies, 0.99) * 1000:7.0f}")


async def _main(args: argparse.Namespace) -> None:
    print(f"{args.at_once} calls at once x {args.rounds} rounds, model {args.latency_ms} ms a call")
    for keep_alive in (True, False):
        log = Path(tempfile.mkdtemp(prefix="turnflow-pool-")) / "connections"
        model = StandInModel(free_port(), delay=args.latency_ms / 1000, keep_alive=keep_alive,
                             connections=str(log))
        model.start()
        try:
            print(f"\nserver {'keeps connections alive' if keep_alive else 'closes each'}")
            print("pool            calls  conns  per call   wall s  p50 ms  p99 ms")
            for _ in range(args.pairs):
                for pool in POOLS:
                    print(await _run(pool, model.base_url, log, args), flush=True)
        finally:
            model.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--at-once", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--latency-ms", type=int, default=200)
    asyncio.run(_main(parser.parse_args()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
