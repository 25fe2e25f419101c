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


def loads(text: str | bytes) -> Any:
    """``json.loads`` refusing ``NaN``, ``Infinity``, ``-Infinity`` and numbers that overflow a
    double, with ``NotJsonNumber``, a ``ValueError`` (as for any text that is not JSON)."""
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)


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
