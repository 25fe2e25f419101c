"""Do handlers and tool handlers: their context, their results, and how results are read.

A handler runs inside the turn, before the host saves, so it runs at least once and must be
idempotent on ``ctx.key``. It returns ``ok()``, ``skipped()``, ``failed()`` or ``defer()``
(plain dicts like ``{"ok": True}`` are accepted too).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar

ResultKind = Literal["ok", "skipped", "failed", "defer"]


@dataclass(frozen=True)
class ActionContext:
    """What a do handler sees. ``with_`` is the step's rendered ``with``."""

    key: str
    with_: dict[str, Any]
    data: dict[str, Any]
    context: dict[str, Any]
    input: dict[str, Any]
    session_id: str
    now: datetime
    run_id: str
    flow_id: str
    step_id: str


@dataclass(frozen=True)
class ActionResult:
    """What a do handler returned, read into one shape."""

    kind: ResultKind
    spoke: bool = False
    data: dict[str, Any] | None = None
    reason: str | None = None
    ms: int = 0


_new = object.__new__
T = TypeVar("T")


def _filled(cls: type[T], values: dict[str, Any]) -> T:
    """``cls(**values)`` for a frozen dataclass of this module, ``values`` holding every field
    in declared order: the instance's ``__dict__`` filled at once instead of through the
    frozen ``__setattr__`` guard one field at a time (a third of the cost). The result is the
    same object: these dataclasses neither convert values nor have a ``__post_init__``. A turn
    builds a context for every do step and its handler a result."""
    instance = _new(cls)
    instance.__dict__.update(values)
    return instance


def action_context(
    key: str,
    with_: dict[str, Any],
    data: dict[str, Any],
    context: dict[str, Any],
    input: dict[str, Any],
    session_id: str,
    now: datetime,
    run_id: str,
    flow_id: str,
    step_id: str,
) -> ActionContext:
    """``ActionContext(key=..., with_=..., ..., step_id=...)``, as ``_filled`` builds it."""
    return _filled(ActionContext, {
        "key": key,
        "with_": with_,
        "data": data,
        "context": context,
        "input": input,
        "session_id": session_id,
        "now": now,
        "run_id": run_id,
        "flow_id": flow_id,
        "step_id": step_id,
    })


def _result(
    kind: ResultKind, spoke: bool, data: dict[str, Any] | None, reason: str | None, ms: int
) -> ActionResult:
    """``ActionResult(kind, spoke, data, reason, ms)``, as ``_filled`` builds it."""
    return _filled(
        ActionResult, {"kind": kind, "spoke": spoke, "data": data, "reason": reason, "ms": ms}
    )


def ok(spoke: bool = False, data: dict[str, Any] | None = None) -> ActionResult:
    """The action did its job; ``spoke`` says it answered the customer itself."""
    return _result("ok", spoke, data, None, 0)


def skipped(reason: str = "") -> ActionResult:
    """The action chose not to run; the run continues."""
    return _result("skipped", False, None, reason, 0)


def failed(reason: str = "") -> ActionResult:
    """The action failed; the run takes ``on_fail`` or continues."""
    return _result("failed", False, None, reason, 0)


def defer(ms: int = 60_000) -> ActionResult:
    """Run the same step again, under the same key, after ``ms``."""
    return _result("defer", False, None, None, ms)


def read_result(value: Any) -> ActionResult:
    """Read a handler's return value; None counts as ``ok()``."""
    if isinstance(value, ActionResult):
        return value
    if value is None or value is True:
        return ok()
    if isinstance(value, dict):
        if value.get("defer") is not None:
            raw = value["defer"]
            if isinstance(raw, dict):
                raw = raw.get("ms", 60_000)
            return defer(int(raw) if not isinstance(raw, bool) else 60_000)
        if value.get("failed"):
            reason = value["failed"]
            return failed(reason if isinstance(reason, str) else str(value.get("reason", "")))
        if value.get("skipped"):
            reason = value["skipped"]
            return skipped(reason if isinstance(reason, str) else str(value.get("reason", "")))
        if value.get("ok"):
            data = value.get("data")
            return ok(bool(value.get("spoke", False)), data if isinstance(data, dict) else None)
    return failed(f"unreadable action result {value!r}")


_ARITY: dict[int, tuple[Any, int | None]] = {}


def _arity(handler: Any) -> int | None:
    """How many positional arguments ``handler`` takes (None: any number).

    Cached per handler: handlers live on the agent, so the signature is read once, not on
    every call. The handler itself is kept next to its arity so a recycled id never matches.
    """
    cached = _ARITY.get(id(handler))
    if cached is not None and cached[0] is handler:
        return cached[1]
    try:
        params = inspect.signature(handler).parameters.values()
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
        arity: int | None = None if varargs else len(positional)
    except (TypeError, ValueError):  # builtins without a signature take everything
        arity = None
    _ARITY[id(handler)] = (handler, arity)
    return arity


async def call_handler(handler: Any, *args: Any) -> Any:
    """Call a sync or async handler with as many of ``args`` as it takes."""
    arity = _arity(handler)
    count = len(args) if arity is None else min(arity, len(args))
    value = handler(*args[:count])
    if inspect.isawaitable(value):
        value = await value
    return value


@dataclass(frozen=True)
class ToolContext:
    """What a tool handler sees besides its arguments."""

    data: dict[str, Any]
    context: dict[str, Any]
    session_id: str
    now: datetime
    run_id: str | None
    step_id: str | None


@dataclass(frozen=True)
class ToolResult:
    """A tool's answer for the model, and an optional ``data`` patch written as given."""

    result: Any = None
    data: dict[str, Any] | None = None


def read_tool_result(value: Any) -> ToolResult:
    """A ``ToolResult``, a dict with ``data`` (patch) and ``result``, or any plain result."""
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, dict) and isinstance(value.get("data"), dict):
        rest = {k: v for k, v in value.items() if k != "data"}
        return ToolResult(rest.get("result", rest or None), value["data"])
    return ToolResult(value)
