"""The outbox's wait for a turn's acks: ``consumer.outbox._settled`` against ``asyncio.gather``.

Run: ``python -m bench.acks_bench [-n TURNS]`` (or ``make bench-acks``). A turn publishes a
reply and a timer and waits for both acks, which nearly always come in one produce response.
Each simulated turn here creates two futures, has the event loop resolve both in one callback
(as the producer's response handler does) and waits for them, either with
``asyncio.gather(..., return_exceptions=True)``, as the outbox did, or one by one with
``_settled``, as it does now. Both ways run in alternating rounds in one process and the CPU
time per turn of each is printed, with their difference and ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from consumer.outbox import _settled

Wait = Callable[[list[asyncio.Future[Any]]], Awaitable[list[Any]]]


async def _gathered(futures: list[asyncio.Future[Any]]) -> list[Any]:
    return await asyncio.gather(*futures, return_exceptions=True)


async def _turns(wait: Wait, turns: int) -> float:
    """CPU microseconds per turn of ``turns`` waits for two acks resolved together."""
    loop = asyncio.get_running_loop()

    def respond(futures: list[asyncio.Future[Any]]) -> None:
        for future in futures:
            future.set_result(None)

    begin = time.process_time()
    for _ in range(turns):
        acks: list[asyncio.Future[Any]] = [loop.create_future(), loop.create_future()]
        loop.call_soon(respond, acks)
        outcomes = await wait(acks)
        assert outcomes == [None, None]
    return (time.process_time() - begin) / turns * 1e6


async def _rounds(turns: int, rounds: int) -> dict[str, list[float]]:
    ways: dict[str, Wait] = {"gather": _gathered, "one by one": _settled}
    for wait in ways.values():
        await _turns(wait, turns // 10)  # warm-up
    taken: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, wait in ways.items():
            taken[name].append(await _turns(wait, turns))
    return taken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("-n", "--turns", type=int, default=20_000, help="turns per round")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    taken = asyncio.run(_rounds(args.turns, args.rounds))
    medians = {name: statistics.median(values) for name, values in taken.items()}
    for name, values in taken.items():
        shown = " ".join(f"{v:.2f}" for v in values)
        print(f"{name:>10}: median {medians[name]:6.2f} µs CPU per turn  (rounds: {shown})")
    saved = medians["gather"] - medians["one by one"]
    print(f"one by one saves {saved:.2f} µs a turn; "
          f"{medians['one by one'] / medians['gather']:.2f} x gather's time")


if __name__ == "__main__":
    main()
