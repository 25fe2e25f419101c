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
"""

from __future__ import annotations

from urllib.parse import quote, unquote_to_bytes

__all__ = ["run_id", "session_key", "session_of", "session_tag", "silence_key"]


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


def session_key(name: str, session_id: str, local: str) -> str:
    """A key that is not built on a run (``idle``, ``handoff``, ``silence``): ``local`` is
    what makes it unique within the conversation."""
    return f"{name}@{session_tag(session_id)}:{local}"


def session_of(key: str) -> str | None:
    """The session id a key (or run id) was minted for, or None for a key of another shape
    (one minted before keys carried their conversation, or not by the engine). The inverse of
    the minting above: what makes keys of different conversations unequal."""
    head = key.split(":", 1)[0]
    name, at, tag = head.partition("@")
    if not at or not name or "@" in tag:
        return None
    return unquote_to_bytes(tag).decode("utf-8", "surrogatepass")


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
