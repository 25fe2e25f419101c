"""Slot affinity on llama.cpp: each conversation's understand calls and speak calls keep a
server slot of their own, so each kind finds its own prompt prefix still in the slot's cache.

A llama.cpp server holds one processed prompt per slot (``--parallel`` slots). With the slot
left to the server, one conversation's understand and speak calls, which alternate within every
turn and share little more than the history, keep landing in the same idle slot and overwrite
each other's prefix. ``slot_for`` sends them to two slots of a pair instead: understand to the
pair's even slot, speak to its odd one, the pair picked by a digest of the session id. So
concurrent conversations spread over ``slots // 2`` pairs; two conversations whose digests pick
the same pair share its slots (llama.cpp queues a request for a busy slot), which is why
``slots`` should be the server's whole ``--parallel`` count. Other calls (compaction, skills,
images) are left to the server, as is everything when fewer than two slots are configured.
"""

from __future__ import annotations

import hashlib

SLOT_KINDS: dict[str, int] = {"understand": 0, "speak": 1}
"""The slot of its conversation's pair each call kind with affinity takes."""


def slot_for(
    kind: str, conversation: str | None, slots: int, *, shared: bool = False
) -> int | None:
    """The llama.cpp ``id_slot`` for a call of ``kind`` in ``conversation`` on a server with
    ``slots`` slots, or None (let the server choose): fewer than two slots, no conversation,
    or a kind without affinity. ``shared``: both kinds take the same slot, one of all
    ``slots`` picked by the conversation (the append-only layout, where a speak call's prompt
    starts with the understand call's prompt and reply, and the next understand call's with the
    speak call's)."""
    offset = SLOT_KINDS.get(kind)
    if slots < 2 or conversation is None or offset is None:
        return None
    digest = hashlib.sha256(conversation.encode("utf-8", "surrogatepass")).digest()
    if shared:
        return int.from_bytes(digest[:8], "big") % slots
    pair = int.from_bytes(digest[:8], "big") % (slots // 2)
    return 2 * pair + offset


__all__ = ["SLOT_KINDS", "slot_for"]
