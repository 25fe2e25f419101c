"""What the consumer's own path costs a turn, part by part, with no database and no broker.

Run: ``python -m bench.pipeline_bench [--sessions K] [--rounds R]`` (or ``make bench-pipeline``).

The end-to-end benchmark (``turnflow bench``) measures a turn with PostgreSQL, the broker and
the event loop's I/O in it, on a host whose speed swings between minutes. This one runs
``TurnPipeline.apply`` in one process against the in-memory store and producer of the test
suite, with the end-to-end benchmark's agent (one model call to the offline stand-in, a reply
and a one-hour timer), recorded and with its model calls observed as the consumer runs it. Each
round applies a first message of K sessions at once, then a second one (so the loads and saves
group as under load, and both the new-session insert and the versioned update are saved), in a
fresh store.

The same rounds run five ways, alternating, and each prints its CPU per turn:

- ``whole path``: as the consumer runs it, the JSON log line of each turn written (to
  ``/dev/null``);
- ``no turn log line``: the ``turnflow`` loggers at WARNING, so "turn applied" is not written;
- ``no per-turn metrics``: ``TurnPipeline._observe`` (turn counts, outcome counts, the turn
  and input-to-outbound histograms) skipped;
- ``model answer canned``: the stand-in model's rules replaced by the answer they gave for
  the same call (by call kind and message), so the difference is the stand-in's own work and
  what is left of the engine turn is the engine's, with its model call's plumbing (the
  recording, the call hooks);
- ``engine turn canned``: the agent replaced by one returning the result the real agent gave
  for the same input, so the difference is the engine turn with its model call.

The differences from the whole path are what each part costs; what is left in the last rows is
the pipeline itself (load and save requests, the outbox, grouping, the doubles' own work).

The collector is set as the consumer sets it once started (``consumer.heap.settle``), and each
round starts after a collection outside its timing: otherwise a full collection, every few
rounds, can fall on the same way round after round and decide its median.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from functools import partial
from typing import Any

from bench.harness.stand_in_model import bench_agent
from bench.harness.turn_work import TOPICS, turn_work
from consumer import heap
from consumer.logs import configure_logging
from consumer.model_calls import observe_model_calls
from consumer.outbox import OutboxPublisher
from consumer.turns.pipeline import TurnPipeline, TurnWork
from engine.recording import recorded_agent
from tests.consumer.fakes import FakeProducer, FakeStore


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


class _KeptAnswers:
    """The stand-in model's answers by call kind and customer message: ``keeping()`` calls
    the rules and keeps each answer, ``generate`` hands the kept one back without work."""

    def __init__(self, rules: Any) -> None:
        self._rules = rules
        self.answers: dict[tuple[str, str], Any] = {}

    @staticmethod
    def _key(request: Any) -> tuple[str, str]:
        return request.schema_name, str(request.meta.get("message") or "")

    def keeping(self) -> Any:
        return _Keeper(self)

    async def generate(self, request: Any) -> Any:
        return self.answers[self._key(request)]


class _Keeper:
    def __init__(self, kept: _KeptAnswers) -> None:
        self._kept = kept

    async def generate(self, request: Any) -> Any:
        kept = self._kept
        answer = await kept._rules.generate(request)
        kept.answers[kept._key(request)] = answer
        return answer


@contextmanager
def _model_canned(latency_provider: Any, rules: Any) -> Iterator[None]:
    """The stand-in provider (``bench.harness.stand_in_model.LatencyProvider``) calling ``rules``
    for a while."""
    before = latency_provider._inner
    latency_provider._inner = rules
    try:
        yield
    finally:
        latency_provider._inner = before


def _waves(sessions: int) -> list[list[TurnWork]]:
    return [
        [turn_work(f"s{i}", f"m{wave}", wave * sessions + i) for i in range(sessions)]
        for wave in range(2)
    ]


async def _round(agent: Any, sessions: int) -> float:
    """CPU microseconds per turn of one round: two waves of ``sessions`` turns at once."""
    store, producer = FakeStore(), FakeProducer()
    publisher = OutboxPublisher(store, producer)  # type: ignore[arg-type]
    pipeline = TurnPipeline(store=store, agent=agent, publisher=publisher,  # type: ignore[arg-type]
                            topics=TOPICS)
    waves = _waves(sessions)
    gc.collect()  # each round starts with no garbage of the round before (of another way)
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
    provider = agent.config.provider.inner  # the bench's provider, inside the recording
    kept = _KeptAnswers(provider._inner)
    keeping = _Keeping(agent)
    # Warm-up, and the results and model answers the canned ways give back.
    with _model_canned(provider, kept.keeping()):
        await _round(keeping, sessions)
    canned = _Canned(keeping.results)
    settle_here = not heap.is_settled()
    if settle_here:
        heap.settle()  # the collector as the consumer sets it once started
    ways: dict[str, tuple[Any, Callable[[], Any]]] = {
        "whole path": (agent, nullcontext),
        "no turn log line": (agent, _no_turn_line),
        "no per-turn metrics": (agent, _no_metrics),
        "model answer canned": (agent, partial(_model_canned, provider, kept)),
        "engine turn canned": (canned, nullcontext),
    }
    taken: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for _ in range(rounds):
            for name, (turning, setting) in ways.items():
                with setting():
                    taken[name].append(await _round(turning, sessions))
    finally:
        if settle_here:
            heap.unsettle()
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
