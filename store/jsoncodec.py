"""JSON encoding for jsonb parameters.

The store sends JSON as text and casts it in SQL (`CAST(:x AS jsonb)`), so one encoder decides
how non-JSON Python values are written: datetimes and dates as ISO 8601, UUIDs and Decimals as
strings (no float rounding), pydantic models in their JSON mode, sets and tuples as lists.

PostgreSQL's jsonb cannot hold U+0000, and one NUL in a customer's message must not make a
session unsavable, so NULs are written as U+FFFD (the replacement character).
"""

from __future__ import annotations

import json
import re
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any
from uuid import UUID


def _default(value: Any) -> Any:
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, UUID | Decimal):
        return str(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# `\u0000` preceded by an even number of backslashes is an escaped NUL; after an odd number
# it is the text "\u0000" itself, which must stay as it is.
_ESCAPED_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def dumps(value: Any) -> str:
    """Encode `value` for a jsonb parameter."""
    encoded = json.dumps(value, default=_default, ensure_ascii=False, separators=(",", ":"))
    if "\\u0000" in encoded:
        encoded = _ESCAPED_NUL.sub(lambda m: m.group(1) + "\\ufffd", encoded)
    return encoded


def loads(value: Any) -> Any:
    """Decode a jsonb column (the asyncpg dialect hands jsonb back as text)."""
    return json.loads(value) if isinstance(value, str | bytes) else value
