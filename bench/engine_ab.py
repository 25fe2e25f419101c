"""Two trees' engines side by side: the same turns, in alternating batches, on a noisy host.

Run: ``python -m bench.engine_ab BEFORE_DIR AFTER_DIR [--rounds 15] [--batch 200]``, each
directory a checkout of this repository (e.g. a worktree of the base commit). One worker
process per tree imports that tree's ``engine`` (its directory first on ``PYTHONPATH``) and
builds the turns once; the parent then asks them for batches of turns in turn, in random order
each round, so load on a shared host falls on both trees alike. Prints each row's median over
every turn timed, before and after, and its ratio to the fresh-session turn.

Rows: the code-only turns of ``engine_bench.py`` (fresh session, 1,000 data fields, 10 and 50
live runs, the 50 as the stored JSON dict), its model turn, and the end-to-end benchmark's
turn (``bench.harness.stand_in_model.bench_agent``: count, a model-phrased reply, a one-hour
wait) as the consumer runs it: recorded, model calls observed, a stored session dict and ten
history entries; and the same turn as a conversation's first (``e2efresh``: no session, no history).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

ROWS = ("fresh", "data1000", "runs10", "runs50", "runs50json", "model", "e2e", "e2efresh")


def turns() -> dict[str, Callable[[], Awaitable[Any]]]:
    """The rows' turns, built from the tree on ``PYTHONPATH`` (its engine, its benchmarks)."""
    import bench.engine_bench as eb
    try:
        from bench.harness.stand_in_model import bench_agent
    except ImportError:  # a tree from before bench/harness/
        from bench.e2e_bench import bench_agent
    from consumer.model_calls import observe_model_calls
    from engine.recording import recorded_agent, taping

    agent = eb.code_only_agent()
    message = {"session_id": "s1", "message": "oi", "id": "m1"}

    def code_only(session: Any) -> Callable[[], Awaitable[Any]]:
        request = message if session is None else {**message, "session": session}
        return lambda: agent.turn(request)

    runs10 = asyncio.run(eb.session_with_runs(agent, 10))
    runs50 = asyncio.run(eb.session_with_runs(agent, 50))
    envelope = {"message": "Prazer! Qual o seu e-mail?", "nome": "Maria", "email": None}
    model = eb.model_agent(
        eb.InstantProvider(
            {"understand": {"flows": {"cadastro": 90, "suporte": 0}}, "speak": envelope}
        )
    )
    consumer_agent = recorded_agent(bench_agent(0))
    observe_model_calls(consumer_agent)

    async def stored_conversation() -> tuple[Any, list[dict[str, Any]]]:
        session: Any = None
        history: list[dict[str, Any]] = []
        for i in range(5):
            request: dict[str, Any] = {
                "session_id": "s", "message": f"oi {i}", "id": f"m{i}", "history": history
            }
            if session is not None:
                request["session"] = session
            with taping("envelopes"):
                result = await consumer_agent.turn(request)
            session = json.loads(json.dumps(result.session.model_dump(mode="json")))
            history = [
                *history,
                {"role": "user", "text": f"oi {i}", "at": "2026-01-05T09:00:00Z"},
                *({"role": "assistant", "text": m.text, "at": "2026-01-05T09:00:01Z"}
                  for m in result.messages),
            ]
        return session, history

    stored, history = asyncio.run(stored_conversation())

    async def e2e() -> Any:
        request = {
            "session_id": "s", "message": "oi", "id": "mx", "session": stored, "history": history
        }
        with taping("envelopes"):
            return await consumer_agent.turn(request)

    async def e2e_fresh() -> Any:
        request = {"session_id": "s", "message": "oi", "id": "m0", "session": None, "history": []}
        with taping("envelopes"):
            return await consumer_agent.turn(request)

    return {
        "fresh": code_only(None),
        "data1000": code_only(eb.grown_session(1000)),
        "runs10": code_only(runs10),
        "runs50": code_only(runs50),
        "runs50json": code_only(runs50.model_dump(mode="json")),
        "model": lambda: model.turn(
            {"session_id": "s1", "message": "quero me cadastrar", "id": "m1"}
        ),
        "e2e": e2e,
        "e2efresh": e2e_fresh,
    }


def worker() -> None:
    """Answer each ``ROW N`` line on stdin with the microseconds of N turns, as JSON."""
    loop = asyncio.new_event_loop()
    rows = turns()

    async def batch(turn: Callable[[], Awaitable[Any]], n: int) -> list[float]:
        samples = []
        for _ in range(n):
            begin = time.perf_counter_ns()
            await turn()
            samples.append((time.perf_counter_ns() - begin) / 1000)
        return samples

    for turn in rows.values():
        loop.run_until_complete(batch(turn, 200))  # warm-up
    import engine

    print("ready", engine.__file__, flush=True)
    for line in sys.stdin:
        row, n = line.split()
        print(json.dumps(loop.run_until_complete(batch(rows[row], int(n)))), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    rows = args.rows.split(",")
    trees = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    procs = {}
    for name, tree in trees.items():
        proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "-", "-", "--worker"],
            cwd=tree, env={**os.environ, "PYTHONPATH": tree},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        assert proc.stdout is not None
        ready, engine_file = proc.stdout.readline().split()
        assert ready == "ready" and engine_file.startswith(tree + os.sep), engine_file
        procs[name] = proc
    samples: dict[tuple[str, str], list[float]] = {(t, r): [] for t in trees for r in rows}
    for _ in range(args.rounds):
        for row in rows:
            for name in random.sample(list(trees), len(trees)):
                proc = procs[name]
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(f"{row} {args.batch}\n")
                proc.stdin.flush()
                samples[(name, row)] += json.loads(proc.stdout.readline())
    for proc in procs.values():
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    median = {key: statistics.median(values) for key, values in samples.items()}
    print(f"{'row':12} {'before us':>10} {'after us':>10} {'change':>7}   x fresh before -> after")
    for row in rows:
        before, after = median[("before", row)], median[("after", row)]
        ratio = ""
        if "fresh" in rows:
            ratio = (
                f"   {before / median[('before', 'fresh')]:.2f} -> "
                f"{after / median[('after', 'fresh')]:.2f}"
            )
        change = 100 * (after - before) / before
        print(f"{row:12} {before:10.1f} {after:10.1f} {change:+6.1f}%{ratio}")


if __name__ == "__main__":
    main()
