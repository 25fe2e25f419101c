"""``turnflow consume`` with a timestamp at each step of every turn: the latency benchmark's
consumer when it is asked where a turn waits (``python -m bench.latency_bench --breakdown``).

    python bench/turn_times.py OUT.jsonl      # then as ``turnflow consume``, same environment

The service has spans for the turn and its model calls only, so the steps between are timed
here, from outside: before the service starts, the methods each step goes through are wrapped to
note ``(time.time(), step, session id)``, and at exit the notes are written to ``OUT.jsonl``, one
JSON array a line. The steps, in a turn's order: ``fetched`` (the record joined its
conversation's queue), ``permit``/``permitted`` (the fair queue of loads), ``load``/``loaded``
(the grouped load, its wait for the statement in flight included), ``slot``/``slotted`` (the
turn slot), ``save``/``saved`` (the grouped save), ``publish``/``published`` (sends, acks and
the grouped mark). The fetch loop's offset commits are noted too (``commit``/``committed``, no
session), as are its fetches (``fetch``/``fetch-got`` with the number of records), because a
round that waits for a commit is a round that fetches nothing. And the event loop's lag: every
10 ms a probe sleeps 10 ms and notes by how much more it slept (``lag``, milliseconds in the
third field): how long anything ready waits for the callbacks ahead of it.

Only names are wrapped, never behaviour changed: a step whose method a tree lacks (another
checkout, ``--source``) is skipped and simply missing from the figures. Nothing of this module
is imported at the top: the consumer's own tree (``PYTHONPATH``) decides what runs.
"""

from __future__ import annotations

import atexit
import functools
import json
import sys
import time
from collections.abc import Callable
from typing import Any

Note = tuple[float, str, str]


def _wrap_async(
    owner: Any, name: str, before: str, after: str, session: Callable[..., str],
    notes: list[Note],
) -> None:
    original = getattr(owner, name, None)
    if original is None:
        return

    @functools.wraps(original)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        who = session(*args, **kwargs)
        notes.append((time.time(), before, who))
        try:
            return await original(*args, **kwargs)
        finally:
            notes.append((time.time(), after, who))

    setattr(owner, name, timed)


def install(notes: list[Note]) -> None:
    """Wrap the steps of a turn so each notes when it starts and ends."""
    from consumer.groups import LoadGroup, SaveGroup
    from consumer.outbox import OutboxPublisher
    from consumer.turns import commits, slots, workers

    enqueue = workers.SessionWorkers.enqueue

    @functools.wraps(enqueue)
    def fetched(self: Any, entry: Any) -> Any:
        notes.append((time.time(), "fetched", entry.session_id))
        return enqueue(self, entry)

    workers.SessionWorkers.enqueue = fetched  # type: ignore[method-assign,unused-ignore]
    _wrap_async(slots.TurnSlots, "load", "permit", "permitted",
                lambda self, slot, work: work.parsed.session_id, notes)
    _wrap_async(LoadGroup, "load", "load", "loaded",
                lambda self, request: request.session_id, notes)
    _wrap_async(slots.TurnSlots, "take", "slot", "slotted",
                lambda self, slot, tp, epoch, work, route: work.parsed.session_id, notes)
    _wrap_async(SaveGroup, "save", "save", "saved",
                lambda self, request: request.session_id, notes)
    _wrap_async(OutboxPublisher, "publish_saved", "publish", "published",
                lambda self, session_id, *a, **k: session_id, notes)
    _wrap_async(commits.Commits, "commit", "commit", "committed", lambda *a, **k: "", notes)
    _wrap_fetches(notes)
    _probe_lag(notes)


def _probe_lag(notes: list[Note]) -> None:
    """Start the loop-lag probe with the service (``ConsumerService.run``)."""
    import asyncio

    from consumer.turns.service import ConsumerService

    run = ConsumerService.run

    async def probe() -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time()
            await asyncio.sleep(0.01)
            notes.append((time.time(), "lag", f"{(loop.time() - asked - 0.01) * 1000:.2f}"))

    @functools.wraps(run)
    async def with_probe(self: Any) -> None:
        task = asyncio.create_task(probe())
        try:
            await run(self)
        finally:
            task.cancel()

    ConsumerService.run = with_probe  # type: ignore[method-assign]


def _wrap_fetches(notes: list[Note]) -> None:
    """The fetch loop's ``getmany``: when it asked and how many records it got."""
    from aiokafka import AIOKafkaConsumer

    getmany = AIOKafkaConsumer.getmany

    @functools.wraps(getmany)
    async def timed(self: Any, *partitions: Any, **kwargs: Any) -> Any:
        notes.append((time.time(), "fetch", ""))
        got = await getmany(self, *partitions, **kwargs)
        notes.append((time.time(), "fetch-got", str(sum(len(r) for r in got.values()))))
        return got

    AIOKafkaConsumer.getmany = timed


def main() -> int:
    out = sys.argv[1]
    del sys.argv[1]
    notes: list[Note] = []
    install(notes)

    def write() -> None:
        with open(out, "w") as file:
            for note in notes:
                file.write(json.dumps(note) + "\n")

    atexit.register(write)
    from consumer.cli import main as cli

    return cli(["consume"])


if __name__ == "__main__":
    sys.exit(main())
