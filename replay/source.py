"""Choosing conversations from the turn log: all of them, a list of session ids, those with a
turn in a time range, or a random sample of N of those (the same N for the same seed).

Conversations are read in batches of sessions, so a replay of a month of traffic holds one
batch in memory at a time. A conversation is always read whole, from its first turn: the state
a turn starts from exists only as the result of the turns before it.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from replay.conversations import Conversation, from_logged
from store import Store

__all__ = ["Selection", "choose_sessions", "read_conversations", "select"]


@dataclass(frozen=True)
class Selection:
    """Which conversations to replay; empty means every logged conversation."""

    sessions: Sequence[str] = ()
    since: datetime | None = None
    until: datetime | None = None
    sample: int | None = None
    seed: int = 0


async def choose_sessions(store: Store, selection: Selection) -> list[str]:
    """The session ids ``selection`` names, in id order (a sample keeps that order)."""
    if selection.sessions:
        chosen = sorted(set(selection.sessions))
        if selection.since is not None or selection.until is not None:
            window = set(await store.logged_session_ids(since=selection.since,
                                                        until=selection.until))
            chosen = [s for s in chosen if s in window]
    else:
        chosen = await store.logged_session_ids(since=selection.since, until=selection.until)
    if selection.sample is not None and selection.sample < len(chosen):
        picked = set(random.Random(selection.seed).sample(chosen, selection.sample))
        chosen = [s for s in chosen if s in picked]
    return chosen


async def read_conversations(
    store: Store, session_ids: Sequence[str], *, batch: int = 200
) -> AsyncIterator[Conversation]:
    """The conversations of ``session_ids``, whole, a batch of sessions at a time."""
    for start in range(0, len(session_ids), batch):
        for conversation in from_logged(await store.logged_turns(session_ids[start:start + batch])):
            yield conversation


def select(conversations: Sequence[Conversation], selection: Selection) -> list[Conversation]:
    """``selection`` applied to conversations already in hand (golden files), as
    ``choose_sessions`` applies it to the turn log: a turn's time is the time it ran at."""
    chosen = [
        c for c in conversations
        if (not selection.sessions or c.session_id in selection.sessions)
        and any((selection.since is None or t.at >= selection.since)
                and (selection.until is None or t.at < selection.until) for t in c.turns)
    ]
    chosen.sort(key=lambda c: c.session_id)
    if selection.sample is not None and selection.sample < len(chosen):
        picked = set(random.Random(selection.seed).sample([c.session_id for c in chosen],
                                                          selection.sample))
        chosen = [c for c in chosen if c.session_id in picked]
    return chosen
