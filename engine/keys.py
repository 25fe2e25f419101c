"""The keys and run ids the engine mints: deterministic, and unique across conversations.

A key leaves the engine on every reply (`Message.key`), timer (`ScheduleEntry.key`) and action
(`ctx.key`), and the host uses it as a global identifier: delivery workers dedupe replies on it,
an action passes it to an API as its idempotency key. So every key carries its conversation.

Shape: every key starts with ``{name}@{tag}`` where ``tag`` is the session id percent-encoded
(UTF-8, every character but ``A-Z a-z 0-9 - . _ ~`` escaped), followed by ``:`` and what makes
the key unique within its conversation. Run ids are ``r{n}@{tag}`` (``n`` the session's
counter), and the keys built on them, ``{run_id}:{step_id}:{visit}...``, share the shape.

Why that cannot collide: ``name`` never holds ``@`` and ``tag`` never holds ``@`` or ``:``, so
the text up to the first ``:`` splits back into ``name`` and ``tag`` in exactly one way, and
percent-encoding is one-to-one, so ``tag`` gives back the session id. Two keys of different
conversations therefore differ; within a conversation, the counter, step visits and times that
follow keep them apart, and replaying the same inputs mints the same keys. Readable in a log for
the usual ids (``r3@wa-5511999:confirm:1``); an id with other characters is escaped, never
hashed.

Bursts. Counters and input ids name a key's content only while every input is answered alone:
answered that way, a conversation's inputs are grouped one way only, so a replay from any saved
state mints what the first run minted, for the same content. A burst (several messages answered
as one turn) is a grouping a re-run may not repeat: after a lost turn the same messages may be
re-read with more of them waiting, or fewer, and the counters then name other contents (the
same run, step and visit answering m3 and m4 where it had answered m3 alone). So a burst turn
sets the session's *lineage*, a digest of the previous lineage, the session version and the
burst's messages (``burst_lineage``), and every key minted from then on carries it after the
tag: ``{name}@{tag}@{lineage}:...`` (``r4@wa-5511999@0f3c9a1b7d2e4c58:ack:1``). Two runs of a
conversation that grouped its inputs alike have equal lineages and mint equal keys; runs that
grouped them differently have different lineages from the first difference on, and no key of
one is a key of the other. A lineage never holds ``@`` or ``:`` (lowercase hex), so the head of
a key still splits one way: ``name``, ``tag``, and the lineage when there is one. Silence wake
keys are left without it: they name a time, which is their whole content, and the session
finds them by their exact text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from urllib.parse import quote, unquote_to_bytes

__all__ = [
    "burst_lineage",
    "run_id",
    "run_key",
    "session_key",
    "session_of",
    "session_tag",
    "silence_key",
]

# 16 hex digits: two groupings of one conversation's inputs share a lineage only if their
# digests collide, about one chance in 2**64 for a pair (keys of two conversations never
# meet: their tags differ).
_LINEAGE_BYTES = 8


# The characters ``quote`` never escapes: an id made only of them is its own tag.
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def session_tag(session_id: str) -> str:
    """The session id percent-encoded: no ``@``, no ``:``, one tag per session id. Total: a
    lone surrogate is encoded as its code point's bytes rather than refused. (Every run id
    and most keys carry it, so the usual id, which needs no escape, is given back as it is.)"""
    if type(session_id) is str and _UNRESERVED.issuperset(session_id):
        return session_id
    return quote(session_id.encode("utf-8", "surrogatepass"), safe="")


def run_id(session_id: str, seq: int) -> str:
    """The id of the run minted as number ``seq`` of this session."""
    return f"r{seq}@{session_tag(session_id)}"


def session_key(name: str, session_id: str, local: str, lineage: str = "") -> str:
    """A key that is not built on a run (``idle``, ``handoff``, ``silence``): ``local`` is
    what makes it unique within the conversation; ``lineage`` is the session's after a burst
    (``burst_lineage``), empty before any."""
    if lineage:
        return f"{name}@{session_tag(session_id)}@{lineage}:{local}"
    return f"{name}@{session_tag(session_id)}:{local}"


def run_key(run_id: str, session_id: str, local: str, lineage: str = "") -> str:
    """A key built on a run: ``{run_id}:{local}``, with the session's ``lineage`` after the
    run id's tag when there is one. A run id stored before run ids carried their conversation
    (``r1``) is given its tag first, so the lineage can never be read as a tag."""
    if not lineage:
        return f"{run_id}:{local}"
    head = run_id if "@" in run_id else f"{run_id}@{session_tag(session_id)}"
    return f"{head}@{lineage}:{local}"


def burst_lineage(
    previous: str, version: int, parts: Iterable[tuple[str | None, str | None, str | None]]
) -> str:
    """The lineage a burst turn leaves: a digest of the lineage before it, the session version
    it runs on and its messages as ``(id, at, text)``, oldest first. The same burst answered on
    the same state gives the same lineage (a replay mints the same keys); another grouping gives
    another one."""
    body = json.dumps([previous, version, [list(part) for part in parts]], ensure_ascii=False)
    digest = hashlib.blake2b(body.encode("utf-8", "surrogatepass"), digest_size=_LINEAGE_BYTES)
    return digest.hexdigest()


def session_of(key: str) -> str | None:
    """The session id a key (or run id) was minted for, or None for a key of another shape
    (one minted before keys carried their conversation, or not by the engine). The inverse of
    the minting above: what makes keys of different conversations unequal."""
    head = key.split(":", 1)[0]
    name, at, rest = head.partition("@")
    tag, marked, lineage = rest.partition("@")
    if not at or not name or "@" in lineage or (marked and not _is_lineage(lineage)):
        return None
    return unquote_to_bytes(tag).decode("utf-8", "surrogatepass")


def _is_lineage(text: str) -> bool:
    return len(text) == 2 * _LINEAGE_BYTES and all(c in "0123456789abcdef" for c in text)


def silence_key(session_id: str, key: str) -> tuple[str, str] | None:
    """(flow id, time stamp) of a silence wake key, or None when ``key`` is not one.

    Keys are ``silence@{tag}:{flow}:{ms}`` (see ``engine.keys``); a session stored before keys
    carried their conversation may still be woken by ``silence:{flow}:{session id}:{ms}``."""
    own = session_key("silence", session_id, "")
    if key.startswith(own):
        flow_id, _, stamp = key[len(own) :].rpartition(":")
        return flow_id, stamp
    if key.startswith("silence:"):
        rest, _, stamp = key[len("silence:") :].rpartition(":")
        suffix = f":{session_id}"
        return (rest[: -len(suffix)] if rest.endswith(suffix) else rest), stamp
    return None
