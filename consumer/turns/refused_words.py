"""What a dead-lettered record says about its customer, read as far as it can be read.

A record the parser refuses (a bad ``at``, a key that is not the session id, a missing kind)
still usually names its conversation and carries the customer's words. An operator asked "I
never got an answer" starts from those words, a phone number or an input id, never from a
``topic:partition:offset``, so the consumer keeps them beside the dead-lettered source: the
session id when the record has a usable one (the conversation the record is then listed under),
the message text (or, when the value is not a JSON object, the start of its text), the input
id and the record key.

``read_refused`` never raises, whatever the bytes: every field is optional, bounded in size
(``MAX_WORDS`` for the text, ``MAX_NAME`` for the others) and made storable and printable
(NUL, lone surrogates and other control characters than newline and tab are written as
backslash escapes), so nothing a record holds can fail the store or move a terminal's cursor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_NAME", "MAX_WORDS", "RefusedWords", "printable", "read_refused"]

MAX_WORDS = 2_000
"""The most characters of a refused record's text that are kept."""

MAX_NAME = 256
"""The most characters of a session id, an input id or a key that are kept (a session id is
refused past this length by the parser, so a longer one names no conversation)."""

_MAX_READ = 1 << 20
"""A value longer than this is not decoded at all (the parser refuses it as too large)."""


@dataclass(frozen=True)
class RefusedWords:
    """What could be read of a refused record; None where nothing could."""

    session_id: str | None = None
    message: str | None = None
    input_id: str | None = None
    key: str | None = None


def printable(value: str, limit: int) -> str:
    """``value`` cut to ``limit`` characters (an ellipsis marks the cut), with NUL, lone
    surrogates and control characters other than newline and tab written as escapes."""
    cut = len(value) > limit
    value = value[:limit]
    out: list[str] = []
    for char in value:
        code = ord(char)
        if char in "\n\t":
            out.append(char)
        elif code < 0x20 or code == 0x7F or 0x80 <= code < 0xA0:
            out.append(f"\\x{code:02x}")
        elif 0xD800 <= code < 0xE000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    text = "".join(out)
    return text + "…" if cut else text


def _session_id(value: Any) -> str | None:
    """The record's session id when it is one the parser would take: a non-empty string of
    at most ``MAX_NAME`` characters that PostgreSQL can store."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
        return None
    if "\x00" in value:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return value


def _input_id(body: dict[str, Any]) -> str | None:
    """The id the record's input would run under, as the parser names it, when readable."""
    own: Any = None
    if isinstance(body.get("message"), str):
        own = body.get("id")
    elif isinstance(body.get("wake"), str):
        own = f"wake:{body['wake']}"
    elif isinstance(body.get("event"), str) and isinstance(body.get("key"), str):
        own = f"event:{body['key']}"
    elif isinstance(body.get("start"), dict) and isinstance(body["start"].get("key"), str):
        own = f"start:{body['start']['key']}"
    if not isinstance(own, str) or not own:
        return None
    return printable(own, MAX_NAME)


def read_refused(key: bytes | None, value: bytes | None) -> RefusedWords:
    """What ``key`` and ``value`` say about the customer; see the module docstring."""
    shown_key = (
        None if not key else printable(key[: MAX_NAME * 4].decode("utf-8", "replace"), MAX_NAME)
    )
    if not value or len(value) > _MAX_READ:
        return RefusedWords(key=shown_key)
    text = value.decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        body = None
    if not isinstance(body, dict):
        return RefusedWords(message=printable(text, MAX_WORDS), key=shown_key)
    message = body.get("message")
    return RefusedWords(
        session_id=_session_id(body.get("session_id")),
        message=printable(message, MAX_WORDS) if isinstance(message, str) else None,
        input_id=_input_id(body),
        key=shown_key,
    )
