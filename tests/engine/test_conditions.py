"""Conditions: callables, built-ins and registered names (engine/conditions.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from engine.conditions import ConditionContext, check, holds

CTX = ConditionContext(
    data={"nome": "Ana", "plano": "pro", "vazio": ""},
    context={"stage": "lead"},
    input={},
    now=datetime(2026, 1, 5, tzinfo=UTC),
    session_id="s1",
)
FIELDS = {"nome": {}, "plano": {}, "vazio": {}, "email": {}}


def test_builtins() -> None:
    """Built-ins: known, missing, equals, all, any, not."""
    registry: dict[str, Any] = {}
    assert holds({"known": "nome"}, CTX, registry)
    assert holds({"known": ["nome", "plano"]}, CTX, registry)
    assert not holds({"known": "vazio"}, CTX, registry)
    assert holds({"missing": ["email", "vazio"]}, CTX, registry)
    assert not holds({"missing": ["email", "nome"]}, CTX, registry)
    assert holds({"equals": {"plano": "pro"}}, CTX, registry)
    assert holds({"all": [{"known": "nome"}, {"not": {"known": "email"}}]}, CTX, registry)
    assert holds({"any": [{"known": "email"}, {"known": "nome"}]}, CTX, registry)
    assert not holds({"any": []}, CTX, registry)
    assert holds(None, CTX, registry)


def test_callables_and_registered_names() -> None:
    """A condition is a callable fn(ctx) -> bool, or a registered name called as fn(ctx, arg)."""
    registry = {"inStage": lambda ctx, stage: ctx.context["stage"] == stage}
    assert holds(lambda ctx: ctx.session_id == "s1", CTX, registry)
    assert holds({"inStage": "lead"}, CTX, registry)
    assert not holds({"not": {"inStage": "lead"}}, CTX, registry)


def test_check_reports_shape_and_name_problems() -> None:
    """Names are checked when the agent is built, so evaluation never meets an unknown name."""
    registry = {"inStage": lambda ctx, arg: True}
    assert check({"inStage": "x"}, registry, FIELDS) is None
    assert check(lambda ctx: True, registry, FIELDS) is None
    problems = [
        check("known", registry, FIELDS),
        check({"known": "a", "missing": "b"}, registry, FIELDS),
        check({"known": 3}, registry, FIELDS),
        check({"known": [[]]}, registry, FIELDS),  # a name that is not text (was a TypeError)
        check({"missing": ["nome", {}]}, registry, FIELDS),
        check({"missing": ["zzz"]}, registry, FIELDS),
        check({"equals": "nome"}, registry, FIELDS),
        check({"equals": {"zzz": 1}}, registry, FIELDS),
        check({"all": {"known": "nome"}}, registry, FIELDS),
        check({"any": [{"known": "zzz"}]}, registry, FIELDS),
        check({"not": {"nope": 1}}, registry, FIELDS),
        check({"nope": 1}, registry, FIELDS),
    ]
    assert all(isinstance(p, str) and p for p in problems)
    assert check({"all": [{"known": "nome"}, {"inStage": "x"}]}, registry, FIELDS) is None
