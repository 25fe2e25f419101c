"""Field values, templates and business hours: the small pure functions the phases share.

Nothing the model says lands in ``session.data`` before ``coerce`` accepts it: strings become
numbers and booleans on the way in, enums are enforced, and everything stored is plain JSON.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from engine.coercion import coerce_kind
from engine.config import BusinessHours, FieldSpec


class BadValue(ValueError):
    """A value that does not fit a field; ``code`` is the outcome code to log."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def coerce(name: str, spec: FieldSpec | None, value: Any) -> Any:
    """Return ``value`` fitted to the field, or raise ``BadValue`` with the outcome code."""
    if spec is None:
        raise BadValue("unknown-field", f"unknown field {name!r}")
    try:
        fitted = coerce_kind(spec.type, value)
    except (ValueError, TypeError, OverflowError):  # OverflowError: an int past any float
        raise BadValue("bad-value", f"{name}: {value!r} is not a {spec.type}") from None
    if spec.enum is not None and fitted not in spec.enum:
        raise BadValue("not-in-enum", f"{name}: {fitted!r} is not one of {spec.enum!r}")
    return fitted


def is_known(data: dict[str, Any], name: str) -> bool:
    """A field is known when it holds a value other than None or the empty string."""
    value = data.get(name)
    return value is not None and value != ""


# --- templates ---------------------------------------------------------------------------------

_TEMPLATE = re.compile(r"\{\{\s*([A-Za-z_][\w.-]*)\s*\}\}")


def _lookup(scopes: dict[str, Any], path: str) -> Any:
    parts = path.split(".")
    if parts[0] in ("data", "context", "input") and len(parts) > 1:
        current: Any = scopes.get(parts[0], {})
        parts = parts[1:]
    else:
        current = scopes.get("data", {})
    for part in parts:
        if isinstance(current, dict) and part in current:
            current = current[part]
        else:
            return None
    return current


def template_fields(value: Any) -> list[tuple[str, str]]:
    """(template, data field) for every ``{{name}}`` / ``{{data.name}}`` inside ``value`` (nested
    dicts and lists too), so the agent can check each names a declared field when it is built.
    ``{{context.x}}`` and ``{{input.x}}`` reach the host's scopes and are not fields."""
    if isinstance(value, str):
        out = []
        for match in _TEMPLATE.finditer(value):
            parts = match.group(1).split(".")
            if parts[0] in ("context", "input") and len(parts) > 1:
                continue
            name = parts[1] if parts[0] == "data" and len(parts) > 1 else parts[0]
            out.append((match.group(0), name))
        return out
    if isinstance(value, dict):
        return [found for item in value.values() for found in template_fields(item)]
    if isinstance(value, list | tuple):
        return [found for item in value for found in template_fields(item)]
    return []


def render(template: str, scopes: dict[str, Any]) -> str:
    """Replace ``{{name}}``, ``{{context.x}}``, ``{{input.x}}``; a missing value renders empty."""

    def one(match: re.Match[str]) -> str:
        value = _lookup(scopes, match.group(1))
        return "" if value is None else str(value)

    return _TEMPLATE.sub(one, template)


def render_value(value: Any, scopes: dict[str, Any]) -> Any:
    """Render templates inside a nested ``with``; a string that is one whole template keeps
    the value's own type."""
    if isinstance(value, str):
        whole = _TEMPLATE.fullmatch(value.strip())
        if whole:
            return _lookup(scopes, whole.group(1))
        return render(value, scopes)
    if isinstance(value, dict):
        return {k: render_value(v, scopes) for k, v in value.items()}
    if isinstance(value, list):
        return [render_value(v, scopes) for v in value]
    return value


# --- business hours ----------------------------------------------------------------------------

_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def _hm(text: str) -> tuple[int, int]:
    hour, minute = text.split(":")
    return int(hour), int(minute)


def next_open(at: datetime, hours: BusinessHours | None) -> datetime:
    """The first open minute at or after ``at`` (``at`` itself when open, or no hours set)."""
    if hours is None or not hours.days:
        return at
    zone = ZoneInfo(hours.tz)
    local = at.astimezone(zone)
    holidays = set(hours.holidays)
    for offset in range(0, 370):
        day = (local + timedelta(days=offset)).date()
        window = hours.days.get(_DAYS[day.weekday()])  # type: ignore[call-overload]  # literal keys
        if window is None or day.isoformat() in holidays:
            continue
        (oh, om), (ch, cm) = _hm(window[0]), _hm(window[1])
        opens = datetime(day.year, day.month, day.day, oh, om, tzinfo=zone)
        closes = datetime(day.year, day.month, day.day, ch, cm, tzinfo=zone)
        if offset == 0 and local >= closes:
            continue
        if offset == 0 and local >= opens:
            return at
        return opens.astimezone(UTC)
    return at


def ms(value: datetime) -> int:
    """Milliseconds since the epoch, the unit of every key that carries a time."""
    return int(value.timestamp() * 1000)
