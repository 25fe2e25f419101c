"""What tracing costs a turn: CPU per turn of the consumer's turn path with tracing's hooks
stubbed out, with tracing off, and with tracing on exporting over OTLP/HTTP, side by side.

Run: ``python -m bench.tracing_cost [--sessions K] [--rounds R]`` (or ``make bench-tracing``).

The turn path is the one ``TurnAttempts.process`` (``consumer/turns/attempts.py``) runs for an
inbound record: the turn span (``tracing.process_span``) around ``TurnPipeline.apply``, in one
process against the in-memory store and producer of the test suite, with the end-to-end
benchmark's agent (one model call to the offline stand-in, a reply and a one-hour timer),
recorded and with its model calls observed as the consumer runs it, and the JSON log line of
each turn written (to ``/dev/null``). Each inbound record carries a ``traceparent``, as one from
a traced adapter would. Each round applies a first message of K conversations at once, then a
second one, in a fresh store.

Three ways, alternating round by round, each printing its median CPU per turn (the process's
CPU, every thread's, so the exporter's thread counts):

- ``stubbed``: the hooks tracing added to the turn path replaced by the cheapest stand-ins (no
  turn span at all, ``send_options``/``note_agent``/``log_ids`` constant functions, the
  model-call span hook taken off the provider's hooks): what the path cost before tracing;
- ``off``: as a service runs with no OTEL_* variable set;
- ``on``: ``tracing.configure`` from ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the SDK's
  ``BatchSpanProcessor`` and OTLP/HTTP protobuf exporter, every span sampled), sending to a
  local receiver in a separate process that answers 200 (its CPU is not counted); each round
  ends with a ``force_flush`` inside its timing, so the export of its spans is counted in it;
- ``on, 1/10``: the same with ``OTEL_TRACES_SAMPLER=traceidratio`` and ``_ARG=0.1``, so about
  one turn in ten is recorded and exported (the others' spans are created but not recorded).

Printed: each way's CPU per turn and the ratios ``off / stubbed``, ``on / off`` and
``on, 1/10 / off``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import logging
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from bench.harness.stand_in_model import bench_agent
from bench.harness.turn_work import TOPICS, turn_work
from consumer import heap, tracing
from consumer.logs import configure_logging
from consumer.model_calls import observe_model_calls
from consumer.outbox import OutboxPublisher
from consumer.turns.pipeline import TurnPipeline, TurnWork
from engine.recording import recorded_agent
from tests.consumer.fakes import FakeProducer, FakeStore

GROUP = "turnflow"

# The receiver: a plain HTTP server in its own process answering every POST with 200.
RECEIVER = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@dataclasses.dataclass
class _Record:
    """An inbound record as the turn span reads it (aiokafka's ``ConsumerRecord``)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    headers: list[tuple[str, bytes]]


def _input(session_id: str, text: str, offset: int) -> tuple[TurnWork, _Record]:
    work = turn_work(session_id, text, offset)
    # An adapter's trace: ids as random as a real one's (a ratio sampler reads the trace id).
    ids = random.Random(offset)
    parent = f"00-{ids.getrandbits(128):032x}-{ids.getrandbits(64) | 1:016x}-01".encode()
    record = _Record("inbound.turns", 0, offset, session_id.encode(), [("traceparent", parent)])
    return work, record


def _waves(sessions: int) -> list[list[tuple[TurnWork, _Record]]]:
    return [
        [_input(f"s{i}", f"m{wave}", wave * sessions + i) for i in range(sessions)]
        for wave in range(2)
    ]


async def _turn(pipeline: TurnPipeline, work: TurnWork, record: _Record, spanned: bool) -> Any:
    """One turn as ``TurnAttempts.process`` runs it: inside its span unless stubbed."""
    if not spanned:
        return await pipeline.apply(work)
    with tracing.process_span([record], group=GROUP, conversation_id=work.parsed.session_id):
        return await pipeline.apply(work)


async def _round(agent: Any, sessions: int, spanned: bool, flush: Callable[[], None]) -> float:
    """CPU microseconds per turn of one round: two waves of ``sessions`` turns at once."""
    store, producer = FakeStore(), FakeProducer()
    publisher = OutboxPublisher(store, producer)  # type: ignore[arg-type]
    pipeline = TurnPipeline(store=store, agent=agent, publisher=publisher,  # type: ignore[arg-type]
                            topics=TOPICS)
    waves = _waves(sessions)
    gc.collect()  # each round starts with no garbage of the round before (of another way)
    begin = time.process_time()
    for wave in waves:
        results = await asyncio.gather(*(_turn(pipeline, w, r, spanned) for w, r in wave))
        assert all(r.status == "applied" and r.messages == 1 for r in results), results
    flush()
    return (time.process_time() - begin) / (2 * sessions) * 1e6


@contextmanager
def _stubbed(hooks: Any) -> Iterator[None]:
    """Tracing's hooks on the turn path replaced by constant functions, its model-call hook
    taken off the provider's hooks (the turn span is left out by ``_turn``)."""
    saved = {name: getattr(tracing, name) for name in ("send_options", "note_agent", "log_ids")}
    empty: dict[str, Any] = {}
    tracing.send_options = lambda: empty  # type: ignore[assignment]
    tracing.note_agent = lambda *args: None  # type: ignore[assignment]
    tracing.log_ids = lambda: None  # type: ignore[assignment]
    hooks._hooks.remove(tracing.model_call_span)
    try:
        yield
    finally:
        hooks._hooks.append(tracing.model_call_span)
        for name, value in saved.items():
            setattr(tracing, name, value)


@contextmanager
def _tracing_on(tracer: Any) -> Iterator[None]:
    """The tracer configured at the start, current for a while (``_tracer`` is what every hook
    checks; the provider and its exporter stay up between the ways)."""
    tracing._tracer = tracer
    try:
        yield
    finally:
        tracing._tracer = None


@contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` set and every other OTEL_* variable unset (the SDK reads
    the environment as it builds the provider and its exporter), restored after."""
    saved = {name: value for name, value in os.environ.items() if name.startswith("OTEL_")}
    for name in saved:
        del os.environ[name]
    os.environ.update(values)
    try:
        yield
    finally:
        for name in values:
            os.environ.pop(name, None)
        os.environ.update(saved)


def _receiver() -> tuple[subprocess.Popen[str], int]:
    """The receiver's process, started, and its port."""
    process = subprocess.Popen([sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None
    return process, int(process.stdout.readline())


def _stop(process: subprocess.Popen[str]) -> None:
    """Stop the receiver's process and close its pipe."""
    process.terminate()
    process.wait(timeout=10)
    if process.stdout is not None:
        process.stdout.close()


async def _measure(
    sessions: int, rounds: int, port: int
) -> tuple[dict[str, list[float]], int, int]:
    agent = recorded_agent(bench_agent(0))
    observe_model_calls(agent)
    hooks = agent.config.provider.hooks
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
                "OTEL_SERVICE_NAME": "turnflow-bench"}
    with _environ(endpoint | {"OTEL_TRACES_SAMPLER": "traceidratio",
                              "OTEL_TRACES_SAMPLER_ARG": "0.1"}):
        assert tracing.configure() is True
    sampled_provider, sampled_tracer = tracing._provider, tracing._tracer
    with _environ(endpoint):
        assert tracing.configure() is True
    provider, tracer = tracing._provider, tracing._tracer
    assert provider is not None and sampled_provider is not None
    tracing._tracer = None  # off until a round of an ``on`` way
    exported = _count_exported(provider)
    exported_sampled = _count_exported(sampled_provider)

    def no_flush() -> None:
        pass

    def flush() -> None:
        assert provider is not None
        provider.force_flush()

    def flush_sampled() -> None:
        assert sampled_provider is not None
        sampled_provider.force_flush()

    ways: dict[str, tuple[Callable[[], Any], bool, Callable[[], None]]] = {
        "stubbed": (lambda: _stubbed(hooks), False, no_flush),
        "off": (nullcontext, True, no_flush),
        "on": (lambda: _tracing_on(tracer), True, flush),
        "on, 1/10": (lambda: _tracing_on(sampled_tracer), True, flush_sampled),
    }
    for setting, spanned, flushing in ways.values():  # warm-up, each way once
        with setting():
            await _round(agent, sessions, spanned, flushing)
    settle_here = not heap.is_settled()
    if settle_here:
        heap.settle()  # the collector as the consumer sets it once started
    taken: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for _ in range(rounds):
            for name, (setting, spanned, flushing) in ways.items():
                with setting():
                    taken[name].append(await _round(agent, sessions, spanned, flushing))
    finally:
        if settle_here:
            heap.unsettle()
        sampled_provider.shutdown()
        tracing._tracer = tracer
        tracing.shutdown()
    return taken, exported(), exported_sampled()


def _count_exported(provider: Any) -> Callable[[], int]:
    """A count of the spans the OTLP exporter reported sent (a check the ``on`` way exported)."""
    processor = provider._active_span_processor._span_processors[0]
    exporter = processor._batch_processor._exporter
    sent = [0]
    export = exporter.export

    def counting(spans: Any) -> Any:
        result = export(spans)
        if result.name == "SUCCESS":
            sent[0] += len(spans)
        return result

    exporter.export = counting
    return lambda: sent[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sessions", type=int, default=50, help="conversations per wave")
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    configure_logging("INFO")
    process, port = _receiver()
    started = time.monotonic()
    try:
        with open("/dev/null", "w") as sink:
            for handler in logging.getLogger("turnflow").handlers:
                if isinstance(handler, logging.StreamHandler):
                    handler.setStream(sink)
            taken, exported, sampled = asyncio.run(_measure(args.sessions, args.rounds, port))
    finally:
        _stop(process)
    medians = {name: statistics.median(values) for name, values in taken.items()}
    turns = 2 * args.sessions * args.rounds
    print(f"the turn path (turn span + TurnPipeline.apply) on the test doubles, "
          f"{args.sessions} conversations at once, {args.rounds} rounds of two turns each per "
          f"way, alternating; {time.monotonic() - started:.0f} s; load average "
          f"{os.getloadavg()[0]:.2f}")
    print(f"spans exported to the local OTLP/HTTP receiver: {exported} for "
          f"{turns + 2 * args.sessions} turns traced with warm-up; at 1/10: {sampled}")
    print("median CPU per turn (p25-p75):")
    for name, values in taken.items():
        q = statistics.quantiles(values, n=4)
        print(f"  {name:<9} {medians[name]:7.1f} µs   ({q[0]:.1f}-{q[2]:.1f})")
    off = medians["off"]
    print(f"off / stubbed:   {off / medians['stubbed']:.3f}x")
    for name in ("on", "on, 1/10"):
        print(f"{name + ' / off:':<16} {medians[name] / off:.3f}x "
              f"(+{medians[name] - off:.1f} µs per turn)")


if __name__ == "__main__":
    main()
