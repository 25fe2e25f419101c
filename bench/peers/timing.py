"""What every framework's runner shares: telling the scripted server which turn the next
requests belong to, and timing a customer turn by wall clock and by this process's CPU.

Each framework runs in its own process, and the server in another, so the process's CPU time
(user + system, every thread) over a turn is the framework's own: the server's work is not in
it. Standard library only.
"""

from __future__ import annotations

import json
import resource
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["Timings", "tag"]


def tag(base_url: str, framework: str, conversation: str, turn: int) -> None:
    """Tell the server that the requests from now on belong to this turn."""
    root = base_url.rsplit("/v1", 1)[0]
    data = json.dumps({"framework": framework, "conversation": conversation,
                       "turn": turn}).encode()
    request = urllib.request.Request(f"{root}/bench/turn", data=data,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Timings:
    """Per-turn wall seconds and CPU seconds, written as JSON lines to ``out``."""

    def __init__(self, out: Path, framework: str) -> None:
        self.out, self.framework = out, framework
        self.rows: list[dict[str, Any]] = []

    @contextmanager
    def turn(self, conversation: str, turn: int, **extra: Any) -> Iterator[dict[str, Any]]:
        row: dict[str, Any] = {"framework": self.framework, "conversation": conversation,
                               "turn": turn, **extra}
        wall, cpu = time.perf_counter(), _cpu()
        yield row
        row["seconds"] = time.perf_counter() - wall
        row["cpu_seconds"] = _cpu() - cpu
        self.rows.append(row)
        with self.out.open("a") as sink:
            sink.write(json.dumps(row) + "\n")
