"""How an input's own id is kept in the turn log, so duplicate detection is exact.

A conversation's input id (a message's ``id``, ``event:{key}``, ``start:{key}``) is unique per
session in ``turns`` (index ``uq_turns_input``). PostgreSQL text cannot hold U+0000 or a lone
surrogate, and the JSON columns hold NUL as U+FFFD, so storing the id as JSON does would make
``"a\\x00"`` and ``"a\\ufffd"`` the same id, and an id with NUL would fail its insert. The column
holds the id percent-escaped instead: ``%`` becomes ``%25``, NUL ``%00`` and a lone surrogate
``%uDXXX``. The escape is one-to-one, so two ids are equal in the column exactly when they are
equal as sent, and every other id (the usual case) is stored as it is.
"""

from __future__ import annotations

import re

__all__ = ["stored_input_id"]

_ESCAPED = re.compile("[%\x00\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    char = match.group(0)
    if char == "%":
        return "%25"
    if char == "\x00":
        return "%00"
    return f"%u{ord(char):04X}"


def stored_input_id(input_id: str | None) -> str | None:
    """The turn-log form of an input id; None (and empty) stays None: nothing to dedupe."""
    if not input_id:
        return None
    return _ESCAPED.sub(_escape, input_id)
