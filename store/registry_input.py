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

# Cyrillic and Greek letters that render like Latin ones (after case folding), and the dotless
# i: Cyrillic a, ve, ie, ka, em, en, o, er, es, te, u, ha, Ukrainian i, je, dze, komi de, qa,
# we; Latin script g; Greek alpha, beta, epsilon, iota, kappa, nu, omicron, rho, tau, upsilon, chi.
_LOOK_ALIKE = str.maketrans({
    "\u0430": "a", "\u0432": "b", "\u0435": "e", "\u043a": "k", "\u043c": "m", "\u043d": "h",
    "\u043e": "o", "\u0440": "p", "\u0441": "c", "\u0442": "t", "\u0443": "y", "\u0445": "x",
    "\u0456": "i", "\u0458": "j", "\u0455": "s", "\u0501": "d", "\u051b": "q", "\u051d": "w",
    "\u0261": "g", "\u03b1": "a", "\u03b2": "b", "\u03b5": "e", "\u03b9": "i", "\u03ba": "k",
    "\u03bd": "v", "\u03bf": "o", "\u03c1": "p", "\u03c4": "t", "\u03c5": "u", "\u03c7": "x",
    "\u0131": "i",
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
