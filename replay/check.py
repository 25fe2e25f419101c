"""A version checked by replay before it is activated: ``agents activate AGENT V --check N``.

The last ``count`` conversations the agent answered (by their latest turn in the turn log) are
replayed, with their recorded model replies, against version ``version`` of the agent
(``replay.registry.RegistryAgents`` with that version), and each gets a verdict:

- ``identical``: every turn does what it did;
- ``CHANGED``: a turn departs (its messages, outcomes, runs, timers or fields differ), with the
  first departing turn and what differs;
- ``UNDECIDABLE``: the conversation cannot be replayed against the version (a turn of another
  agent, a version that does not build with the installed packs), with the reason.

Nothing is written: no turn is saved, no message sent, no quota taken.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text

from engine.packs import PackSet
from replay.registry import RegistryAgents
from replay.runner import ConversationReport
from replay.session import replay_many
from replay.source import read_conversations
from store import Store
from store.hosting import Hosting

__all__ = ["Verdict", "check_version", "recent_conversations"]

_RECENT = text(
    """
    SELECT session_id FROM turns WHERE agent_id = :agent_id
    GROUP BY session_id ORDER BY max(id) DESC LIMIT :count
    """
)


@dataclass(frozen=True)
class Verdict:
    session_id: str
    verdict: str  # identical, CHANGED, UNDECIDABLE
    detail: str

    def line(self) -> str:
        return f"{self.verdict}\t{self.session_id}\t{self.detail}".rstrip()


async def recent_conversations(store: Store, agent_id: str, count: int) -> list[str]:
    """The ``count`` conversations the agent answered most recently, oldest first."""
    async with store.engine.connect() as connection:
        rows = (await connection.execute(_RECENT, {"agent_id": agent_id, "count": count})).all()
    return [row.session_id for row in reversed(rows)]


def _verdict(report: ConversationReport) -> Verdict:
    if report.status == "skipped":
        return Verdict(report.session_id, "UNDECIDABLE", report.skipped or "not replayed")
    if report.status == "changed" and report.departures:
        first = report.departures[0]
        return Verdict(report.session_id, "CHANGED",
                       f"turn {first.turn} of {report.turns}: {first.kind} at {first.at}")
    if report.status == "changed":
        return Verdict(report.session_id, "CHANGED", "")
    return Verdict(report.session_id, "identical", f"{report.turns} turns")


async def check_version(
    store: Store, packs: PackSet, agent_id: str, version: int, count: int
) -> list[Verdict]:
    """The verdict of each of the agent's last ``count`` conversations against ``version``."""
    sessions = await recent_conversations(store, agent_id, count)
    source = RegistryAgents(Hosting(store.engine), packs, version=version)
    summary = await replay_many(source, read_conversations(store, sessions))
    return [_verdict(report) for report in summary.reports]
