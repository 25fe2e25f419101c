"""Field coercion, templates and business hours (engine/values.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from engine import Agent, BusinessHours, FakeClock, FieldSpec, FlowConfigurationError, MockProvider
from engine.config import MAX_DURATION_MS
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


def build(**config: Any) -> Agent:
    hi = [{"id": "w", "on": [{"message": []}], "steps": [{"id": "s", "say": "hi"}]}]
    config.setdefault("flows", hi)
    return Agent(name="Ana", provider=MockProvider([]), **config)


def test_unknown_time_zone_is_rejected() -> None:
    """Business hours name a real time zone; an unknown one is a configuration error, not the
    KeyError zoneinfo raises (which pydantic would let through unconverted)."""
    with pytest.raises(ValidationError):
        BusinessHours.model_validate({"tz": "Mars/Olympus"})
    with pytest.raises(FlowConfigurationError) as caught:
        build(business_hours={"tz": "Europe/Lisbn"})
    assert str(caught.value) == "business_hours: tz: Value error, unknown time zone 'Europe/Lisbn'"


@pytest.mark.parametrize(
    "bad", ["9am", "25:00", "24:00", "12:60", "9:00", "09:00:00", " 09:00", ""]
)
def test_business_hours_times_must_be_hh_mm(bad: str) -> None:
    """Each time is HH:MM from 00:00 to 23:59 (next_open builds a datetime from it on every
    turn that reaches a business-hours wait): anything else fails when the agent is built."""
    with pytest.raises(FlowConfigurationError) as caught:
        build(business_hours={"tz": "UTC", "days": {"mon": [bad, "23:00"]}})
    assert str(caught.value).startswith("business_hours: days: Value error, mon: ")
    assert "is not a time HH:MM from 00:00 to 23:59" in str(caught.value)
    with pytest.raises(FlowConfigurationError, match="tue: '9pm' is not a time HH:MM"):
        build(business_hours={"days": {"tue": ["09:00", "9pm"]}})


@pytest.mark.parametrize("window", [["18:00", "09:00"], ["09:00", "09:00"]])
def test_business_hours_open_before_they_close(window: list[str]) -> None:
    """A window opens before it closes on the same day: next_open has no overnight windows."""
    with pytest.raises(FlowConfigurationError, match=r"business_hours: days: .*fri: opens at"):
        build(business_hours={"days": {"fri": window}})


@pytest.mark.parametrize(
    "bad", ["2026-1-6", "20260106", "06/01/2026", "2026-02-30", "2026-01-06T00:00"]
)
def test_holidays_are_iso_dates(bad: str) -> None:
    """A holiday is compared with the day's YYYY-MM-DD, so any other spelling never matches."""
    with pytest.raises(FlowConfigurationError, match=rf"business_hours: holidays: .*{bad!r}"):
        build(business_hours={"days": {"mon": ["09:00", "18:00"]}, "holidays": [bad]})


async def test_the_widest_business_hours_build_and_run() -> None:
    """00:00 to 23:59 and ISO holidays are accepted and a business-hours wait uses them."""
    hours = {"tz": "UTC", "days": {"mon": ["00:00", "23:59"]}, "holidays": ["2026-01-05"]}
    flows = [{"id": "w", "on": [{"message": []}],
              "steps": [{"id": "s", "say": "hi"},
                        {"id": "t", "wait": {"ms": 60_000}, "business_hours": True}]}]
    agent = build(flows=flows, business_hours=hours, clock=FakeClock("2026-01-05T12:00:00Z"))
    result = await agent.turn({"session_id": "s1", "message": "hi", "id": "m1"})
    assert result.schedule[0].at == datetime(2026, 1, 12, tzinfo=UTC)


def _flow(steps: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"id": "f", "on": [{"message": []}], "steps": steps, **extra}


TOO_LONG = MAX_DURATION_MS + 1


@pytest.mark.parametrize(
    ("flows", "step_id", "where"),
    [
        ([_flow([{"id": "t", "wait": {"ms": TOO_LONG}}])], "t", "wait.ms"),
        ([_flow([{"id": "t", "wait": {"ms": 10**20}}])], "t", "wait.ms"),
        ([_flow([{"id": "t", "wait": {"event": "paid", "up_to_ms": TOO_LONG}}])], "t",
         "wait.up_to_ms"),
        ([_flow([{"id": "s", "say": "x"}], on=[{"silence": TOO_LONG}])], None,
         "trigger on[0] (silence): silence"),
        ([_flow([{"id": "s", "say": "x"}], on=[{"event": "paid", "after_ms": TOO_LONG}])], None,
         "trigger on[0] (event): after_ms"),
        ([_flow([{"id": "s", "say": "x"}], repeat={"cooldown_ms": TOO_LONG})], None,
         "repeat.cooldown_ms"),
    ],
)
def test_durations_longer_than_ten_years_are_refused(
    flows: list[Any], step_id: str | None, where: str
) -> None:
    """A turn adds a duration to the current time and a datetime ends at year 9999: a longer
    one fails when the agent is built, naming the flow, the step and the setting."""
    with pytest.raises(FlowConfigurationError) as caught:
        build(flows=flows, events={"paid": {}})
    assert caught.value.flow_id == "f" and caught.value.step_id == step_id
    assert f"{where}: Value error, " in str(caught.value)
    assert f"ms is longer than 10 years (at most {MAX_DURATION_MS})" in str(caught.value)


def test_errors_name_the_wait_and_the_repeat_written() -> None:
    """An event wait's error is about the event wait (not "ms: Field required" of a timer), a
    cooldown's about the cooldown (not "should be 'always' or 'once'")."""
    with pytest.raises(FlowConfigurationError) as caught:
        build(flows=[_flow([{"id": "t", "wait": {"event": "paid", "up_to_ms": 0}}])],
              events={"paid": {}})
    assert str(caught.value) == "flow 'f', step 't': wait.up_to_ms: Input should be greater than 0"
    with pytest.raises(FlowConfigurationError) as caught:
        build(flows=[_flow([{"id": "s", "say": "x"}], repeat={"cooldown_ms": -1})])
    assert str(caught.value) == (
        "flow 'f': repeat.cooldown_ms: Input should be greater than or equal to 0"
    )
    with pytest.raises(FlowConfigurationError) as caught:
        build(flows=[_flow([{"id": "s", "say": "x"}], repeat="sometimes")])
    assert str(caught.value) == "flow 'f': repeat: Input should be 'always' or 'once'"


async def test_the_longest_durations_run() -> None:
    """Ten years is accepted everywhere, and a turn with a wait and a silence that long runs."""
    now = datetime(2026, 1, 5, 12, tzinfo=UTC)
    flows = [
        _flow([{"id": "s", "say": "hi"}, {"id": "t", "wait": {"ms": MAX_DURATION_MS}},
               {"id": "u", "wait": {"event": "paid", "up_to_ms": MAX_DURATION_MS}}],
              repeat={"cooldown_ms": MAX_DURATION_MS}),
        {"id": "n", "on": [{"silence": MAX_DURATION_MS}, {"event": "paid",
                                                        "after_ms": MAX_DURATION_MS}],
         "steps": [{"id": "s", "say": "still there?"}]},
    ]
    agent = build(flows=flows, events={"paid": {}}, clock=FakeClock(now))
    result = await agent.turn({"session_id": "s1", "message": "hi", "id": "m1"})
    assert now + timedelta(milliseconds=MAX_DURATION_MS) in [s.at for s in result.schedule]


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ({"type": "integer", "enum": ["1", "2"]}, "'1' is stored as 1 in a field of type integer"),
        ({"type": "integer", "enum": [1, 2.0]}, "2.0 is stored as 2 in a field of type integer"),
        ({"type": "number", "enum": ["2.5"]}, "'2.5' is stored as 2.5 in a field of type number"),
        ({"type": "boolean", "enum": ["yes"]}, "'yes' is stored as True in a field of type bool"),
        ({"type": "string", "enum": ["a", 1]}, "1 is stored as '1' in a field of type string"),
        ({"type": "date", "enum": ["2026-01-05T10:00"]}, "is stored as '2026-01-05'"),
        ({"type": "email", "enum": [" a@b.co"]}, "' a@b.co' is stored as 'a@b.co'"),
        ({"type": "integer", "enum": [True]}, "True is not a value of type integer"),
        ({"type": "string", "enum": [{"a": 1}]}, "{'a': 1} is not a value of type string"),
    ],
)
def test_enum_members_are_values_the_type_stores(field: dict[str, Any], message: str) -> None:
    """A value is checked against enum after coercion, so a member that coercion would not give
    back unchanged could never be matched: the agent refuses it, naming the field."""
    with pytest.raises(FlowConfigurationError) as caught:
        build(fields={"qtd": field})
    assert caught.value.field == "qtd"
    assert str(caught.value).startswith("field 'qtd': enum: Value error, ")
    assert message in str(caught.value)


def test_enum_members_of_every_type_build() -> None:
    """Members written as the type stores them build, and a coerced value still matches."""
    fields = {
        "a": {"type": "integer", "enum": [1, 2]},
        "b": {"type": "number", "enum": [1, 2.5]},
        "c": {"type": "boolean", "enum": [True]},
        "d": {"type": "string", "enum": ["tune-up", "brakes"]},
        "e": {"type": "date", "enum": ["2026-01-05"]},
        "f": {"type": "datetime", "enum": ["2026-01-05T13:00:00Z"]},
        "g": {"type": "email", "enum": ["a@b.co"]},
    }
    agent = build(fields=fields)
    assert coerce("a", agent.fields["a"], "2") == 2
    assert coerce("f", agent.fields["f"], "2026-01-05T10:00:00-03:00") == "2026-01-05T13:00:00Z"
