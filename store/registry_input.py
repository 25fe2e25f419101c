"""What the registry refuses before PostgreSQL sees it, and how look-alike ids are told apart.

PostgreSQL text cannot hold NUL (``invalid byte sequence for encoding "UTF8": 0x00``) and a
lone UTF-16 surrogate is not a character (UTF-8 cannot encode it; the JSON codec would store it
as U+FFFD, so what ``agents show`` prints would differ from what was put). Both are refused,
with where they were found, rather than stored changed: ``RegistryError``, which the CLI prints
as one line and exit 2.

``skeleton`` folds an id to what a reader sees: NFKC (a decomposed ``é`` is the composed one,
full-width letters are ASCII), case folded, and the common Cyrillic and Greek letters drawn
like Latin ones mapped to them. Ids are still compared exactly everywhere; the skeleton only
marks ids that look alike in ``agents list``.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from store.errors import RegistryInputError

__all__ = ["check_document", "check_id", "skeleton"]

# Cyrillic and Greek letters that render like Latin ones (after case folding).
_LOOK_ALIKE = str.maketrans({
    "а": "a", "в": "b", "е": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p",
    "с": "c", "т": "t", "у": "y", "х": "x", "і": "i", "ј": "j", "ѕ": "s", "ԁ": "d",
    "ԛ": "q", "ԝ": "w", "ɡ": "g", "α": "a", "β": "b", "ε": "e", "ι": "i", "κ": "k",
    "ν": "v", "ο": "o", "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "ı": "i",
})


def _bad(value: str) -> str | None:
    if "\x00" in value:
        return "a NUL character"
    if any("\ud800" <= c <= "\udfff" for c in value):
        return "a lone surrogate (not a character)"
    return None


def check_id(value: str, what: str) -> str:
    """``value`` when it can be stored exactly as written; ``RegistryInputError`` otherwise."""
    if not isinstance(value, str):
        raise RegistryInputError(f"{what} must be text")
    bad = _bad(value)
    if bad is not None:
        raise RegistryInputError(f"{what} holds {bad}: refused")
    return value


def check_document(document: Any, where: str = "document") -> None:
    """Every key and text value of a JSON document can be stored exactly, or
    ``RegistryInputError`` naming the first path that cannot."""
    stack: list[tuple[str, Any]] = [(where, document)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            bad = _bad(value)
            if bad is not None:
                raise RegistryInputError(f"{path} holds {bad}: refused")
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and _bad(key) is not None:
                    raise RegistryInputError(f"a key in {path} holds {_bad(key)}: refused")
                stack.append((f"{path}.{key}", item))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(value))


def skeleton(value: str) -> str:
    """What ``value`` looks like to a reader (see the module); equal skeletons look alike."""
    folded = unicodedata.normalize("NFKC", value).casefold()
    mapped = folded.translate(_LOOK_ALIKE)
    stripped = "".join(c for c in unicodedata.normalize("NFD", mapped)
                       if not unicodedata.combining(c))
    return unicodedata.normalize("NFC", stripped)
