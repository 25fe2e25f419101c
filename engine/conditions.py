"""Conditions: callables or one-key dicts, evaluated against a ``ConditionContext``.

Built-ins: ``known``, ``missing``, ``equals``, ``all``, ``any``, ``not``. Any other key names a
condition registered on the agent, called as ``fn(ctx, arg)``. Names are checked when the agent
is built (``check``), so evaluation never meets an unknown name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engine.config import BUILTIN_CONDITIONS
from engine.values import is_known


@dataclass(frozen=True)
class ConditionContext:
    """What a condition may look at."""

    data: dict[str, Any]
    context: dict[str, Any]
    input: dict[str, Any]
    now: datetime
    session_id: str
    extra: dict[str, Any] = field(default_factory=dict)


Registry = Mapping[str, Callable[..., Any]]


def _names(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def holds(condition: Any, ctx: ConditionContext, registry: Registry) -> bool:
    """Evaluate ``condition``; None holds."""
    if condition is None:
        return True
    if callable(condition):
        return bool(condition(ctx))
    ((name, arg),) = condition.items()
    if name == "known":
        return all(is_known(ctx.data, f) for f in _names(arg))
    if name == "missing":
        return not any(is_known(ctx.data, f) for f in _names(arg))
    if name == "equals":
        return all(ctx.data.get(k) == v for k, v in arg.items())
    if name == "all":
        return all(holds(c, ctx, registry) for c in arg)
    if name == "any":
        return any(holds(c, ctx, registry) for c in arg)
    if name == "not":
        return not holds(arg, ctx, registry)
    return bool(registry[name](ctx, arg))


def check(condition: Any, registry: Registry, fields: Mapping[str, Any]) -> str | None:
    """Return a problem with ``condition``'s shape or names, or None when it is fine."""
    if condition is None or callable(condition):
        return None
    if not isinstance(condition, dict) or len(condition) != 1:
        return f"a condition is a callable or a one-key dict, not {condition!r}"
    ((name, arg),) = condition.items()
    if name in ("known", "missing"):
        if not isinstance(arg, str) and not (
            isinstance(arg, list) and all(isinstance(f, str) for f in arg)
        ):
            return f"{name} takes a field or a list of fields"
        unknown = [f for f in _names(arg) if f not in fields]
        return f"unknown field {unknown[0]!r} in {name}" if unknown else None
    if name == "equals":
        if not isinstance(arg, dict):
            return "equals takes {field: value}"
        unknown = [f for f in arg if f not in fields]
        return f"unknown field {unknown[0]!r} in equals" if unknown else None
    if name in ("all", "any"):
        if not isinstance(arg, list):
            return f"{name} takes a list of conditions"
        for sub in arg:
            problem = check(sub, registry, fields)
            if problem:
                return problem
        return None
    if name == "not":
        return check(arg, registry, fields)
    if name not in registry:
        known = sorted(set(registry) | BUILTIN_CONDITIONS)
        return f"unknown condition {name!r} (known: {', '.join(known)})"
    return None
