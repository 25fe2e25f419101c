"""What a turn costs by where its history comes from: none, loaded, or a window kept.

Run: ``python -m bench.window_bench [--sessions K] [--rounds R] [--history-turns 100,1000]``
(or ``make bench-window``).

The end-to-end benchmark's 100-turns-in row gives each session two turns, so half of them load
their history window into a consumer that holds none yet. This one tells the three kinds of
turn apart, in one process, on a real PostgreSQL (``DATABASE_URL``, else an embedded one; a
scratch database is created there and dropped), with the end-to-end benchmark's agent run by
``TurnPipeline`` as the consumer runs it (the broker replaced by the test suite's in-memory
producer). Each round, K sessions at a time, at most 64 turns in flight:

- ``fresh``: the first turn of new sessions (no history);
- ``fresh, 2nd``: their second turn (two entries of history, a kept window);
- ``cold, 100 in``: the first turn here of sessions seeded 100 turns into their conversation
  (the load reads the last ``HISTORY_LIMIT`` = 50 entries; the window is made and kept);
- ``warm, 100 in``: their next turn (the window is held; the load reads no history).

``--history-turns`` names how far in the seeded sessions are (100 by default); with several
(``100,1000``) each depth gets its cold and warm phase, side by side in one run: a turn's cost
must not grow with the conversation's length, since its load reads at most ``HISTORY_LIMIT``
entries and the session's state does not keep its turns.

Each line gives the process's CPU per turn (user and system, from ``os.times``, 10 ms ticks),
the time the garbage collector took (its callbacks) and how long making the windows took
(``engine.history.entries_of_text``: validation, shared fields sets, chat messages).
The collector is set as the consumer sets it (``consumer.heap.settle``). The first phase of the
run only warms the process up and is left out.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

from bench.harness.databases import scratch_database
from bench.harness.history import seed_history
from bench.harness.stand_in_model import bench_agent
from bench.harness.turn_work import TOPICS, turn_work
from consumer import heap
from consumer.outbox import OutboxPublisher
from consumer.turns.pipeline import TurnPipeline, TurnWork
from engine import history as history_cache
from store import Store
from tests.consumer.fakes import FakeProducer

IN_FLIGHT = 64


def phases(history_turns: tuple[int, ...] = (100,)) -> tuple[str, ...]:
    """The phases of a round, in the order they run: fresh sessions' first and second turn,
    then, for each depth in ``history_turns``, the cold and the warm turn of sessions that far
    into their conversation."""
    deep = (f"{kind}, {turns} in" for turns in history_turns for kind in ("cold", "warm"))
    return ("fresh", "fresh, 2nd", *deep)


PHASES = phases()


class _Clocks:
    """The collector's time (``gc.callbacks``) and the time spent making windows, in this
    thread's CPU seconds, summed since installed."""

    def __init__(self) -> None:
        self.gc = 0.0
        self.windows = 0.0
        self._started = 0.0

    def _collecting(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.thread_time()
        else:
            self.gc += time.thread_time() - self._started

    def installed(self) -> Callable[[], None]:
        """Start counting; the returned call stops it."""
        made = history_cache.entries_of_text

        def timed(text: str, decode: Any = None) -> Any:
            started = time.thread_time()
            try:
                return made(text, decode)
            finally:
                self.windows += time.thread_time() - started

        gc.callbacks.append(self._collecting)
        history_cache.entries_of_text = timed  # type: ignore[assignment]

        def remove() -> None:
            gc.callbacks.remove(self._collecting)
            history_cache.entries_of_text = made  # type: ignore[assignment]

        return remove


# Every input a record of its own: a source seen before would be skipped as a replay.
_SOURCE_TOPIC = f"inbound.turns.{uuid.uuid4().hex[:8]}"
_offsets = itertools.count()


def _works(session_ids: list[str], turn: int) -> Iterator[TurnWork]:
    for session_id in session_ids:
        yield turn_work(session_id, f"mensagem {turn}", next(_offsets), topic=_SOURCE_TOPIC)


async def _phase(
    pipeline: TurnPipeline, session_ids: list[str], turn: int, clocks: _Clocks
) -> dict[str, float]:
    """Apply one turn of each session (at most ``IN_FLIGHT`` at once); µs per turn."""
    slots = asyncio.Semaphore(IN_FLIGHT)

    async def one(work: TurnWork) -> None:
        async with slots:
            result = await pipeline.apply(work)
            if result.status != "applied":
                raise RuntimeError(f"turn not applied: {result}")

    gc_before, windows_before, times = clocks.gc, clocks.windows, os.times()
    await asyncio.gather(*(one(w) for w in _works(session_ids, turn)))
    after, n = os.times(), len(session_ids)
    return {
        "user": (after.user - times.user) / n * 1e6,
        "sys": (after.system - times.system) / n * 1e6,
        "gc": (clocks.gc - gc_before) / n * 1e6,
        "windows": (clocks.windows - windows_before) / n * 1e6,
    }


async def measure(
    url: str, *, sessions: int, rounds: int, history_turns: tuple[int, ...] = (100,)
) -> dict[str, list[dict[str, float]]]:
    """Each phase's figures (``phases(history_turns)``), one per round (after one warm-up
    phase)."""
    store = await Store.connect(url, pool_size=20, max_overflow=0)
    clocks = _Clocks()
    remove = clocks.installed()
    taken: dict[str, list[dict[str, float]]] = {phase: [] for phase in phases(history_turns)}
    try:
        pipeline = TurnPipeline(
            store=store, agent=bench_agent(0),
            publisher=OutboxPublisher(store, FakeProducer()),  # type: ignore[arg-type]
            topics=TOPICS, history_limit=50, history_cache_sessions=10 * sessions,
        )
        heap.settle()
        run = uuid.uuid4().hex[:6]  # new conversations on every run, even in one database
        await _phase(pipeline, [f"warm-up-{run}-{i}" for i in range(sessions)], 0, clocks)
        for r in range(rounds):
            fresh = [f"fresh-{run}-{r}-{i}" for i in range(sessions)]
            taken["fresh"].append(await _phase(pipeline, fresh, 0, clocks))
            taken["fresh, 2nd"].append(await _phase(pipeline, fresh, 1, clocks))
            for turns in history_turns:
                long = [f"long-{turns}-{run}-{r}-{i}" for i in range(sessions)]
                await seed_history(url, long, turns)
                taken[f"cold, {turns} in"].append(await _phase(pipeline, long, 0, clocks))
                taken[f"warm, {turns} in"].append(await _phase(pipeline, long, 1, clocks))
            print(f"  round {r + 1} of {rounds} done", flush=True)
    finally:
        remove()
        heap.unsettle()
        await store.close()
    return taken


def _depths(text: str) -> tuple[int, ...]:
    """``--history-turns``: distinct whole numbers of at least 1, comma-separated."""
    try:
        depths = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not comma-separated whole numbers: {text!r}") from None
    if not depths or min(depths) < 1 or len(set(depths)) != len(depths):
        raise argparse.ArgumentTypeError(f"each at least 1 and none twice: {text!r}")
    return depths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=500, help="sessions per phase")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--history-turns", type=_depths, default=(100,),
                        help="how many turns in the seeded sessions are, comma-separated "
                             "(default 100)")
    args = parser.parse_args()
    if args.sessions < 1 or args.rounds < 1:
        raise SystemExit("--sessions and --rounds must be at least 1")
    with ExitStack() as stack:
        database = scratch_database(stack, prefix="turnflow-window")
        print(f"database: {database.where}; {args.sessions} sessions a phase, {args.rounds} "
              f"rounds, {IN_FLIGHT} turns in flight", flush=True)
        taken = asyncio.run(measure(database.url, sessions=args.sessions, rounds=args.rounds,
                                    history_turns=args.history_turns))
    print()
    print("µs per turn, median of the rounds (spread): user+system CPU, of it in collections "
          "and in making windows")
    for phase, runs in taken.items():
        cpu = [r["user"] + r["sys"] for r in runs]
        print(f"  {phase:<14} CPU {statistics.median(cpu):6.0f} ({min(cpu):.0f}-{max(cpu):.0f})"
              f"  system {statistics.median(r['sys'] for r in runs):5.0f}"
              f"  collections {statistics.median(r['gc'] for r in runs):5.0f}"
              f"  making windows {statistics.median(r['windows'] for r in runs):5.0f}")


if __name__ == "__main__":
    main()
