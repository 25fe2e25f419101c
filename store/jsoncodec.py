"""JSON encoding for jsonb parameters.

The store sends JSON as text and casts it in SQL (`CAST(:x AS jsonb)`), so one encoder decides
how non-JSON Python values are written: datetimes and dates as ISO 8601, UUIDs and Decimals as
strings (no float rounding), pydantic models in their JSON mode, sets and tuples as lists.
"""

from __future__ import annotations

import json
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


def dumps(value: Any) -> str:
    """Encode `value` for a jsonb parameter."""
    return json.dumps(value, default=_default, ensure_ascii=False, separators=(",", ":"))


def loads(value: Any) -> Any:
    """Decode a jsonb column (the asyncpg dialect hands jsonb back as text)."""
    return json.loads(value) if isinstance(value, str | bytes) else value
