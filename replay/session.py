"""Replaying many conversations and summing them up, with progress for long runs."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterable, Callable, Iterable
from typing import TextIO

from engine import Agent
from replay.conversations import Conversation
from replay.registry import AgentSource, AgentUnavailable
from replay.report import Expectations, ReplaySummary
from replay.runner import HISTORY_LIMIT, ConversationReport, TurnAgent, replay_conversation
from replay.tape_provider import TapeProvider

__all__ = ["Progress", "replay_many"]


class Progress:
    """``replayed 120/1000 conversations (3 changed)`` on stderr: rewritten in place on a
    terminal, a line every few seconds otherwise (CI logs), nothing when ``total`` is small."""

    def __init__(self, total: int | None, stream: TextIO | None = None,
                 every_s: float = 5.0, quiet_below: int = 50) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = every_s
        self.enabled = total is None or total >= quiet_below
        self._last = 0.0
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def update(self, done: int, note: str = "", *, final: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not final and not self._tty and now - self._last < self.every_s:
            return
        if not final and self._tty and now - self._last < 0.1:
            return
        self._last = now
        of = f"/{self.total}" if self.total is not None else ""
        text = f"replayed {done}{of} conversations" + (f" ({note})" if note else "")
        if self._tty:
            self.stream.write("\r" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


async def replay_many(
    agent: Agent | AgentSource,
    conversations: AsyncIterable[Conversation] | Iterable[Conversation],
    *,
    expectations: Expectations | None = None,
    history_limit: int = HISTORY_LIMIT,
    progress: Progress | None = None,
    on_report: Callable[[ReplaySummary], None] | None = None,
) -> ReplaySummary:
    """Replay each conversation with its recorded model replies; the summary of them all.

    ``agent`` is one agent for every turn, or a source of each turn's agent (``replay.registry``:
    the registry version that answered it); a conversation the source has no agent for is
    skipped with the reason."""
    summary = ReplaySummary(expectations=expectations or Expectations())

    async def each(conversation: Conversation) -> None:
        tape = TapeProvider()
        chosen: Agent | TurnAgent | None = agent if isinstance(agent, Agent) else None
        labels: list[str] = []
        report = ConversationReport(session_id=conversation.session_id,
                                    turns=len(conversation.turns))
        if chosen is None:
            assert not isinstance(agent, Agent)
            try:
                chosen, labels = await agent.for_conversation(conversation)
            except AgentUnavailable as exc:
                report.skipped = str(exc)
        if chosen is not None:
            report = await replay_conversation(chosen, conversation, provider=tape,
                                               history_limit=history_limit)
            report.agents = labels
            summary.unrecorded_by_kind.update(tape.unrecorded)
        summary.add(report)
        if progress is not None:
            progress.update(len(summary.reports), f"{summary.count('changed')} changed")
        if on_report is not None:
            on_report(summary)

    if isinstance(conversations, AsyncIterable):
        async for conversation in conversations:
            await each(conversation)
    else:
        for conversation in conversations:
            await each(conversation)
    if progress is not None:
        progress.update(len(summary.reports), f"{summary.count('changed')} changed", final=True)
    return summary
