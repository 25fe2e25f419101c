"""The core never reads the system clock, ``random`` or ``uuid`` (style rule 1)."""

from __future__ import annotations

import re
from pathlib import Path

import engine

CORE = [
    "actions.py",
    "agent.py",
    "collect.py",
    "compaction.py",
    "conditions.py",
    "config.py",
    "envelopes.py",
    "moves.py",
    "prompt.py",
    "request.py",
    "session.py",
    "starts.py",
    "state.py",
    "values.py",
    *[
        f"phases/{p}.py"
        for p in ("load", "ingest", "understand", "decide", "advance", "speak", "settle", "finish")
    ],
]
FORBIDDEN = re.compile(
    r"datetime\.now|datetime\.utcnow|date\.today|time\.time\(|time\.monotonic|"
    r"import random|from random|import uuid|from uuid|SystemClock\(\)\.now"
)


def test_core_modules_read_no_clock_randomness_or_uuid() -> None:
    """Never read the system clock, random or uuid in the engine: time comes from the clock."""
    root = Path(engine.__file__).parent
    offenders = [
        name for name in CORE if FORBIDDEN.search((root / name).read_text(encoding="utf-8"))
    ]
    assert offenders == []
    assert all((root / name).exists() for name in CORE)
