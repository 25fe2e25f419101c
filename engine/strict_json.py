"""JSON text from outside decoded as JSON defines it: no ``NaN``, no ``Infinity``, no number too
large for a double.

Python's ``json`` reads all three (as ``nan``, ``inf``, and ``inf`` for ``1e999``). A model's
reply holding one would reach the turn as a number no flow score, field or store can use:
``int(nan)`` raises, and PostgreSQL's ``jsonb`` refuses it when the session is saved. Decoded
here, such text is simply not JSON, and the caller treats it as it treats any reply that is not
(an unusable reply, retried like a failed call).
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["NotJsonNumber", "depth", "loads"]


class NotJsonNumber(ValueError):
    """A number JSON does not define (and PostgreSQL's ``jsonb`` cannot hold); the message
    names which kind, never the text around it."""


def _refuse_constant(name: str) -> Any:
    raise NotJsonNumber(f"value holds {name}, which is not a JSON number")


def _finite_float(literal: str) -> float:
    number = float(literal)
    if not math.isfinite(number):
        raise NotJsonNumber("value holds a number too large for a double")
    return number


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)
"""One decoder for every call: ``json.loads`` with these options builds a new one each time,
which costs more than decoding a ~100-byte input (the consumer parses one per record)."""


def loads(text: str | bytes) -> Any:
    """``json.loads`` refusing ``NaN``, ``Infinity``, ``-Infinity`` and numbers that overflow a
    double, with ``NotJsonNumber``, a ``ValueError`` (as for any text that is not JSON).

    The same checks and errors as ``json.loads`` before the decode (a BOM in text, bytes in
    UTF-8, -16 or -32 detected as it detects them), through the one shared decoder."""
    if isinstance(text, str):
        if text.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    elif isinstance(text, bytes | bytearray):
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    else:
        raise TypeError(
            f"the JSON object must be str, bytes or bytearray, not {text.__class__.__name__}"
        )
    return _DECODER.decode(text)


def depth(value: Any, limit: int | None = None) -> int:
    """How many objects and lists a decoded ``value`` nests (a flat object is 1). Iterative, so a
    value the decoder took is measured whatever its depth; with ``limit``, the walk stops as soon
    as the nesting passes it (the result is then some depth above ``limit``, not the deepest)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if limit is not None and deepest > limit:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest
