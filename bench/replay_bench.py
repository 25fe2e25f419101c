"""Replay benchmark: conversations per second that ``turnflow replay`` gets through.

Run: ``python -m bench.replay_bench`` (or ``make bench-replay``). Everything runs in this
process with the engine only (no broker, no database), like a replay of golden files:

- record: the demo agent's scripted conversations (the replay tests' scripts: bookings, some
  with a "no" first, some paid, some opening-hours questions) run with the offline rule
  provider answering, turns recorded as the service records them; the baseline;
- replay identical: the same conversations replayed against the same agent with the recorded
  model replies (every turn of every conversation runs and is compared);
- replay changed: against a reworded greeting, so most conversations stop at their first turn;
- golden files: writing them and reading them back.

Figures side by side come from the same run; the ratio is replay over record.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from replay import Conversation, record_conversation
from replay.golden import read_directory, write_golden
from replay.session import replay_many
from tests.replay.support import demo, script, step


def _reword(flows: list[dict[str, Any]]) -> None:
    step(flows, "welcome", "hello")["say"] = "Hello! Ana here, at Spoke & Chain."


async def _record(count: int) -> tuple[list[Conversation], float]:
    agent = demo()
    started = time.perf_counter()
    conversations = [await record_conversation(agent, f"s-{n}", script(n)) for n in range(count)]
    return conversations, time.perf_counter() - started


async def _replay(conversations: list[Conversation], changed: bool) -> tuple[float, int, int]:
    agent = demo(_reword if changed else None)
    started = time.perf_counter()
    summary = await replay_many(agent, conversations)
    elapsed = time.perf_counter() - started
    expected = "changed" if changed else "identical"
    if not changed and summary.count("identical") != len(conversations):
        raise SystemExit("benchmark invalid: a recorded conversation did not replay identical")
    return elapsed, summary.turns, summary.count(expected)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="best of this many runs")
    args = parser.parse_args()
    n = args.conversations

    conversations, record_s = asyncio.run(_record(n))
    turns = sum(len(c.turns) for c in conversations)
    calls = sum(len(t.calls or []) for c in conversations for t in c.turns)
    records = [record_s]
    for _ in range(args.rounds - 1):
        records.append(asyncio.run(_record(n))[1])
    record_s = min(records)
    same = min((asyncio.run(_replay(conversations, False)) for _ in range(args.rounds)),
               key=lambda r: r[0])
    changed = min((asyncio.run(_replay(conversations, True)) for _ in range(args.rounds)),
                  key=lambda r: r[0])
    with tempfile.TemporaryDirectory() as directory:
        started = time.perf_counter()
        for conversation in conversations:
            write_golden(conversation, Path(directory))
        write_s = time.perf_counter() - started
        started = time.perf_counter()
        back = read_directory(Path(directory))
        read_s = time.perf_counter() - started
    assert len(back) == n

    print(f"replay benchmark: {n} conversations, {turns} turns, {calls} recorded model calls "
          f"(best of {args.rounds})")
    print(f"{'':28}{'conv/s':>10}{'turns/s':>10}{'ms/conv':>10}")
    rows = [
        ("record (rule provider)", record_s, turns),
        ("replay, identical", same[0], same[1]),
        (f"replay, changed ({changed[2]} depart)", changed[0], changed[1]),
        ("golden files: write", write_s, turns),
        ("golden files: read", read_s, turns),
    ]
    for name, seconds, turn_count in rows:
        print(f"{name:28}{n / seconds:10.0f}{turn_count / seconds:10.0f}"
              f"{1000 * seconds / n:10.3f}")
    print(f"replay identical / record: {record_s / same[0]:.2f}x the conversations per second")


if __name__ == "__main__":
    main()
