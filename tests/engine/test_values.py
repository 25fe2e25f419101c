"""Field coercion, templates and business hours (engine/values.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from engine import BusinessHours, FieldSpec
from engine.values import BadValue, coerce, is_known, next_open, render, render_value


def spec(kind: str, **extra: Any) -> FieldSpec:
    return FieldSpec.model_validate({"type": kind, **extra})


@pytest.mark.parametrize(
    ("kind", "given", "stored"),
    [
        ("string", "Ana", "Ana"),
        ("string", 42, "42"),
        ("number", "3,5", 3.5),
        ("number", "10", 10),
        ("number", 2.5, 2.5),
        ("number", 7, 7),
        ("integer", "12", 12),
        ("integer", 12.0, 12),
        ("boolean", "sim", True),
        ("boolean", "false", False),
        ("boolean", 1, True),
        ("boolean", True, True),
        ("date", "2026-01-05T10:00:00", "2026-01-05"),
        ("datetime", "2026-01-05T10:00:00-03:00", "2026-01-05T13:00:00Z"),
        ("email", " ana@acme.com ", "ana@acme.com"),
    ],
)
def test_values_are_coerced_to_their_type(kind: str, given: Any, stored: Any) -> None:
    """Strings are coerced to numbers and booleans on the way in; stored values are JSON."""
    value = coerce("f", spec(kind), given)
    assert value == stored and type(value) is type(stored)


@pytest.mark.parametrize(
    ("kind", "given"),
    [
        ("string", True),
        ("string", {"a": 1}),
        ("number", "abc"),
        ("number", True),
        ("number", [1]),
        ("number", "nan"),
        ("integer", "1.5"),
        ("boolean", "talvez"),
        ("date", 20260105),
        ("datetime", 5),
        ("email", "not-an-email"),
    ],
)
def test_values_that_do_not_fit_are_bad_value(kind: str, given: Any) -> None:
    """A value that does not fit the type is dropped (code: 'bad-value')."""
    with pytest.raises(BadValue) as caught:
        coerce("f", spec(kind), given)
    assert caught.value.code == "bad-value"


def test_enum_and_unknown_field_codes() -> None:
    """A value outside enum is 'not-in-enum'; an unknown field name is 'unknown-field'."""
    with pytest.raises(BadValue) as outside:
        coerce("plano", spec("string", enum=["basic", "pro"]), "gold")
    assert outside.value.code == "not-in-enum"
    with pytest.raises(BadValue) as unknown:
        coerce("nada", None, "x")
    assert unknown.value.code == "unknown-field"
    assert coerce("n", spec("integer", enum=[1, 2]), "2") == 2


def test_known_means_neither_none_nor_empty() -> None:
    """Pending is collect minus known: None and the empty string are not known."""
    assert is_known({"a": 0, "b": False}, "a") and is_known({"b": False}, "b")
    assert not is_known({"a": None}, "a") and not is_known({"a": ""}, "a")
    assert not is_known({}, "a")


def test_templates_reach_three_scopes_and_never_execute() -> None:
    """{{name}} renders data.name; {{context.x}}, {{input.x}} reach the other scopes; a missing
    value renders as the empty string. No code execution in templates."""
    scopes = {
        "data": {"nome": "Ana", "end": {"cidade": "Rio"}},
        "context": {"x": 1},
        "input": {"y": 2},
    }
    assert (
        render("{{nome}} {{ data.end.cidade }} {{context.x}} {{input.y}}", scopes) == "Ana Rio 1 2"
    )
    assert render("[{{missing}}] [{{input.nope.deep}}]", scopes) == "[] []"
    assert render("{{__import__('os')}}", scopes) == "{{__import__('os')}}"


def test_render_value_keeps_whole_template_types() -> None:
    """The with of a do step is rendered against data, context and input, nested."""
    scopes = {"data": {"n": 3}, "context": {}, "input": {"ids": [1, 2]}}
    rendered = render_value(
        {"n": "{{n}}", "ids": "{{input.ids}}", "s": "n={{n}}", "k": [True]}, scopes
    )
    assert rendered == {"n": 3, "ids": [1, 2], "s": "n=3", "k": [True]}


HOURS = BusinessHours.model_validate(
    {
        "tz": "America/Sao_Paulo",
        "days": {"mon": ["09:00", "18:00"], "tue": ["09:00", "18:00"]},
        "holidays": ["2026-01-06"],
    }
)


@pytest.mark.parametrize(
    ("at", "expected"),
    [
        # Monday 10:00 local is open: unchanged.
        ("2026-01-05T13:00:00Z", "2026-01-05T13:00:00Z"),
        # Monday 07:00 local: opens at 09:00 local the same day.
        ("2026-01-05T10:00:00Z", "2026-01-05T12:00:00Z"),
        # Monday 19:00 local: Tuesday is a holiday, next open is the following Monday.
        ("2026-01-05T22:00:00Z", "2026-01-12T12:00:00Z"),
        # Saturday: next Monday.
        ("2026-01-10T15:00:00Z", "2026-01-12T12:00:00Z"),
    ],
)
def test_next_open_minute(at: str, expected: str) -> None:
    """A wait with business_hours: true moves at to the next open minute."""
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731  # local shorthand
    assert next_open(parse(at), HOURS) == parse(expected)


def test_no_hours_leaves_the_time_alone() -> None:
    """Without business hours on the agent a wait keeps its time."""
    at = datetime(2026, 1, 10, tzinfo=UTC)
    assert next_open(at, None) == at
    assert next_open(at, BusinessHours()) == at
    closed = BusinessHours.model_validate({"days": {}, "tz": "UTC"})
    assert next_open(at, closed) == at


def test_unknown_time_zone_is_rejected() -> None:
    """Business hours name a real time zone."""
    with pytest.raises(Exception):  # noqa: B017  # pydantic wraps the zoneinfo error
        BusinessHours.model_validate({"tz": "Mars/Olympus"})
