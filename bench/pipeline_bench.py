"""What the consumer's own path costs a turn, part by part, with no database and no broker.

Run: ``python bench/pipeline_bench.py [--sessions K] [--rounds R]`` (or ``make bench-pipeline``).

The end-to-end benchmark (``turnflow bench``) measures a turn with PostgreSQL, the broker and
the event loop's I/O in it, on a host whose speed swings between minutes. This one runs
``TurnPipeline.apply`` in one process against the in-memory store and producer of the test
suite, with the end-to-end benchmark's agent (one model call to the offline stand-in, a reply
and a one-hour timer), recorded and with its model calls observed as the consumer runs it. Each
round applies a first message of K sessions at once, then a second one (so the loads and saves
group as under load, and both the new-session insert and the versioned update are saved), in a
fresh store.

The same rounds run four ways, alternating, and each prints its CPU per turn:

- ``whole path``: as the consumer runs it, the JSON log line of each turn written (to
  ``/dev/null``);
- ``no turn log line``: the ``turnflow`` loggers at WARNING, so "turn applied" is not written;
- ``no per-turn metrics``: ``TurnPipeline._observe`` (turn counts, outcome counts, the turn
  and input-to-outbound histograms) skipped;
- ``engine turn canned``: the agent replaced by one returning the result the real agent gave
  for the same input, so the difference is the engine turn with its model call.

The differences from the whole path are what each part costs; what is left in the last rows is
the pipeline itself (load and save requests, the outbox, grouping, the doubles' own work).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))
if str(BENCH_DIR.parent) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR.parent))

from e2e_bench import bench_agent  # noqa: E402  # the bench directory joins the path above

from consumer.logs import configure_logging  # noqa: E402
from consumer.model_calls import observe_model_calls  # noqa: E402
from consumer.outbox import OutboxPublisher  # noqa: E402
from consumer.parser import ParsedInput, parse_record  # noqa: E402
from consumer.pipeline import OutboundTopics, TurnPipeline, TurnWork  # noqa: E402
from engine.recording import recorded_agent  # noqa: E402
from store import SourceRecord  # noqa: E402
from tests.consumer.fakes import FakeProducer, FakeStore  # noqa: E402

TOPICS = OutboundTopics(messages="outbound.messages", schedule="outbound.schedule")


def _work(session_id: str, text: str, offset: int) -> TurnWork:
    raw = f'{{"session_id": "{session_id}", "message": "{text}", "id": "{text}-{offset}"}}'
    parsed = parse_record(session_id.encode(), raw.encode(), max_bytes=10_000)
    assert isinstance(parsed, ParsedInput), parsed
    return TurnWork(parsed=parsed, source=SourceRecord("inbound.turns", 0, offset))


class _Canned:
    """The agent's results for the same inputs, handed back without running a turn."""

    def __init__(self, results: dict[tuple[str, str | None], Any]) -> None:
        self._results = results

    async def turn(self, request: dict[str, Any]) -> Any:
        return self._results[(request["session_id"], request.get("id"))]


class _Keeping:
    """The real agent, keeping each result by session and input id for ``_Canned``."""

    def __init__(self, agent: Any) -> None:
        self._agent = agent
        self.results: dict[tuple[str, str | None], Any] = {}

    async def turn(self, request: dict[str, Any]) -> Any:
        result = await self._agent.turn(request)
        self.results[(request["session_id"], request.get("id"))] = result
        return result


def _waves(sessions: int) -> list[list[TurnWork]]:
    return [
        [_work(f"s{i}", f"m{wave}", wave * sessions + i) for i in range(sessions)]
        for wave in range(2)
    ]


async def _round(agent: Any, sessions: int) -> float:
    """CPU microseconds per turn of one round: two waves of ``sessions`` turns at once."""
    store, producer = FakeStore(), FakeProducer()
    publisher = OutboxPublisher(store, producer)  # type: ignore[arg-type]
    pipeline = TurnPipeline(store=store, agent=agent, publisher=publisher,  # type: ignore[arg-type]
                            topics=TOPICS)
    waves = _waves(sessions)
    begin = time.process_time()
    for wave in waves:
        results = await asyncio.gather(*(pipeline.apply(work) for work in wave))
        assert all(r.status == "applied" and r.messages == 1 for r in results), results
    return (time.process_time() - begin) / (2 * sessions) * 1e6


@contextmanager
def _no_turn_line() -> Iterator[None]:
    logger = logging.getLogger("turnflow")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextmanager
def _no_metrics() -> Iterator[None]:
    observe = TurnPipeline._observe
    TurnPipeline._observe = lambda *args: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        TurnPipeline._observe = observe  # type: ignore[method-assign]


async def _measure(sessions: int, rounds: int) -> dict[str, list[float]]:
    agent = recorded_agent(bench_agent(0))
    observe_model_calls(agent)
    keeping = _Keeping(agent)
    await _round(keeping, sessions)  # warm-up, and the results the canned agent gives back
    canned = _Canned(keeping.results)
    ways: dict[str, tuple[Any, Callable[[], Any]]] = {
        "whole path": (agent, nullcontext),
        "no turn log line": (agent, _no_turn_line),
        "no per-turn metrics": (agent, _no_metrics),
        "engine turn canned": (canned, nullcontext),
    }
    taken: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, (turning, setting) in ways.items():
            with setting():
                taken[name].append(await _round(turning, sessions))
    return taken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sessions", type=int, default=50, help="sessions per wave")
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    configure_logging("INFO")
    with open("/dev/null", "w") as sink:
        for handler in logging.getLogger("turnflow").handlers:
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(sink)
        taken = asyncio.run(_measure(args.sessions, args.rounds))
    medians = {name: statistics.median(values) for name, values in taken.items()}
    whole = medians["whole path"]
    print(f"TurnPipeline.apply with the test doubles, {args.sessions} sessions at once, "
          f"{args.rounds} rounds of two turns each; median CPU per turn:")
    for name, value in medians.items():
        spent = "" if name == "whole path" else f"   the part left out: {whole - value:6.1f} µs"
        print(f"  {name:<20} {value:7.1f} µs{spent}")


if __name__ == "__main__":
    main()
