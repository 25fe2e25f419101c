"""Fitting a value to a field's type: the one rule ``engine.values.coerce`` and the field
specification's own check of its ``enum`` (``engine.config.FieldSpec``) both apply.

A module of its own, importing nothing of the configuration, so ``engine.config`` can use it
while ``engine.values`` uses both.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Any

from engine.clock import to_utc

__all__ = ["coerce_kind"]

_TRUE = {"true", "yes", "y", "sim", "s", "1", "on"}
_FALSE = {"false", "no", "n", "nao", "não", "0", "off"}
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def coerce_kind(kind: str, value: Any) -> Any:
    """``value`` fitted to a field type (``FieldSpec.type``); ``ValueError``, ``TypeError``
    or ``OverflowError`` when it does not fit."""
    if kind == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, bool):
            raise ValueError("boolean for a string")
        if isinstance(value, int | float):
            return str(value)
        raise ValueError("not a string")
    if kind in ("number", "integer"):
        if isinstance(value, bool):
            raise ValueError("boolean for a number")
        if isinstance(value, str):
            text = value.strip().replace(",", ".") if value.count(",") == 1 else value.strip()
            number = float(text)
        elif isinstance(value, int | float):
            number = float(value)
        else:
            raise ValueError("not a number")
        if number != number or number in (float("inf"), float("-inf")):
            raise ValueError("not a finite number")
        if kind == "integer":
            if not number.is_integer():
                raise ValueError("not an integer")
            return int(number)
        if isinstance(value, int):
            return value
        return int(number) if number.is_integer() and isinstance(value, str) else number
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE:
            return True
        if isinstance(value, str) and value.strip().lower() in _FALSE:
            return False
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ValueError("not a boolean")
    if kind == "date":
        if not isinstance(value, str):
            raise ValueError("not a date")
        return date.fromisoformat(value.strip()[:10]).isoformat()
    if kind == "datetime":
        if not isinstance(value, str):
            raise ValueError("not a datetime")
        return to_utc(value.strip()).isoformat().replace("+00:00", "Z")
    # email
    if not isinstance(value, str) or not _EMAIL.match(value.strip()):
        raise ValueError("not an email")
    return value.strip()
