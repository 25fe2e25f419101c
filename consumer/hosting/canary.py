"""Which version a conversation with no run in progress starts on: live, or the canary.

``turnflow agents activate AGENT V --percent N`` makes V the agent's canary: N% of the
conversations that start work on the agent take V, the rest the live version. The choice is a
pure function of the agent id and the session id (the first 8 bytes of a SHA-256 of both,
modulo 100), so every consumer makes the same choice for a conversation, each conversation
keeps its side for as long as the canary stands, and a restart or a rebalance changes nothing.
Raising N only moves conversations from live to the canary (a bucket below N stays below a
larger N); ``--percent 100`` promotes V and activating any version rolls the canary back.
A conversation with runs in progress stays pinned to its version either way
(``consumer.hosting.pinning``).
"""

from __future__ import annotations

import hashlib

__all__ = ["bucket", "choose_version"]


def bucket(agent_id: str, session_id: str) -> int:
    """The conversation's bucket for the agent, 0-99."""
    digest = hashlib.sha256(
        agent_id.encode("utf-8", "surrogatepass") + b"\x00"
        + session_id.encode("utf-8", "surrogatepass")
    ).digest()
    return int.from_bytes(digest[:8], "big") % 100


def choose_version(
    agent_id: str, session_id: str, live: int | None, canary: int | None, percent: int | None
) -> tuple[int | None, bool]:
    """``(version, is_canary)`` for a conversation starting work on the agent."""
    if canary is None or not percent or canary == live:
        return live, False
    if bucket(agent_id, session_id) < percent:
        return canary, True
    return live, False
