"""Burst turns in recorded conversations: replayed identical, each message in the history."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from replay import record_conversation
from replay.runner import _history_entries
from replay.session import replay_many
from tests.replay.support import demo


def bursty(n: int) -> list[tuple[datetime, dict[str, Any]]]:
    """A booking told in bursts: greeting and name together, then service and day apart."""
    t = datetime(2026, 3, 2, 9, tzinfo=UTC) + timedelta(minutes=n)
    return [
        (t, {"burst": [{"message": "hi", "id": "m0"}], "message": f"my name is N{n}",
             "id": "m1"}),
        (t + timedelta(seconds=30), {"burst": [{"message": "I need the brakes fixed",
                                                 "id": "m2"}],
                                     "message": "on saturday", "id": "m3"}),
        (t + timedelta(seconds=60), {"message": "yes", "id": "m4"}),
    ]


async def test_conversations_with_bursts_replay_identical() -> None:
    """Twelve conversations whose turns answer bursts replay identical on the same agent,
    each history holding every message of a burst as its own customer entry."""
    agent = demo()
    conversations = list(await asyncio.gather(
        *(record_conversation(agent, f"b-{n}", bursty(n)) for n in range(12))))
    first = conversations[0].turns[0]
    users = [e["text"] for e in _history_entries(first, first.recorded.messages)
             if e["role"] == "user"]
    assert users == ["hi", "my name is N0"]
    summary = await replay_many(demo(), conversations)
    assert summary.counts()["identical"] == 12 and summary.ok
