"""A pytest helper for an agent's own CI: its golden conversations must replay unchanged.

    # tests/test_golden.py of an agent's repository
    from replay.pytest import assert_replays
    from mybot import agent

    def test_golden_conversations_still_replay():
        assert_replays(agent, "tests/golden")

The golden files come from ``turnflow replay export``. A change fails the test with the same
report ``turnflow replay`` prints: the first departing turn of each conversation and its diff.
``expect`` accepts changes as ``--expect-changes`` does (aspects such as ``messages``, or
session ids); an accepted change does not end the comparison, so a later unexpected one still
fails. ``allow_undecidable`` is ``--allow-undecidable``. Inside an async test,
``await replays(agent, directory)`` instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

from engine import Agent
from replay.golden import read_directory
from replay.report import Expectations, ReplaySummary, report_text
from replay.runner import HISTORY_LIMIT
from replay.session import replay_many

__all__ = ["assert_replays", "replays"]


async def replays(
    agent: Agent,
    directory: str | Path,
    *,
    expect: Iterable[str] = (),
    allow_undecidable: bool = False,
    history_limit: int = HISTORY_LIMIT,
) -> ReplaySummary:
    """Replay every golden file of ``directory``; ``AssertionError`` with the report when a
    conversation changed unexpectedly or the directory holds none."""
    conversations = read_directory(Path(directory))
    if not conversations:
        raise AssertionError(f"no golden files (*.json) in {directory}")
    expectations = Expectations.parse(expect, allow_undecidable=allow_undecidable)
    summary = await replay_many(agent, conversations, expectations=expectations,
                                history_limit=history_limit)
    if not summary.ok:
        raise AssertionError("golden conversations changed:\n" + report_text(summary))
    return summary


def assert_replays(
    agent: Agent,
    directory: str | Path,
    *,
    expect: Iterable[str] = (),
    allow_undecidable: bool = False,
    history_limit: int = HISTORY_LIMIT,
) -> ReplaySummary:
    """``replays`` for a plain (not async) test."""
    return asyncio.run(replays(agent, directory, expect=expect,
                               allow_undecidable=allow_undecidable, history_limit=history_limit))
