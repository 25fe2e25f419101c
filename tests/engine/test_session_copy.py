"""A turn never writes the session it was given, whether it came as a ``Session`` or as the
JSON dict a host stores, down to the values nested in ``data``, ``metadata`` and run ``input``;
and the copy a turn works on equals the dump/validate round trip it replaced."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Agent, FakeClock, MockProvider, Session, migrate_session, ok
from engine.session import Claim, copy_session

START = "2026-01-05T09:00:00Z"

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=3), st.floats(0, 1)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
nested = st.dictionaries(st.sampled_from(["a", "b", "c"]), json_values, max_size=3)


def scribble(value: Any) -> None:
    """Write into every dict and list inside ``value``, as a careless handler might."""
    if isinstance(value, dict):
        for item in list(value.values()):
            scribble(item)
        value["scribbled"] = True
    elif isinstance(value, list):
        for item in list(value):
            scribble(item)
        value.append("scribbled")


def handler(ctx: Any) -> Any:
    for value in ctx.data.values():
        scribble(value)
    for value in ctx.input.values():
        scribble(value)
    return ok(data={"touched": ctx.step_id})


def build(clock: FakeClock) -> Agent:
    return Agent(
        name="Ana",
        provider=MockProvider([]),
        clock=clock,
        fields={"nome": {"type": "string"}},
        actions={"scribble": handler},
        events={"go": {}},
        idle="silent",
        flows=[
            {
                "id": "chat",
                "on": [{"message": []}],
                "steps": [
                    {"id": "note", "do": "scribble"},
                    {"id": "hi", "say": "Oi"},
                    {"id": "rest", "wait": {"ms": 3_600_000}},
                ],
            },
            {
                "id": "keeper",
                "steps": [
                    {"id": "park", "wait": {"event": "go"}},
                    {"id": "note", "do": "scribble"},
                    {"id": "done", "say": "Feito"},
                ],
            },
        ],
    )


async def stored_session(agent: Agent, data: dict[str, Any], inputs: list[dict[str, Any]]) -> Any:
    """A stored session holding ``data`` and one parked ``keeper`` run per input."""
    session: dict[str, Any] = {
        "id": "s1",
        "v": 4,
        "data": copy.deepcopy(data),
        "metadata": {"host": copy.deepcopy(data)},
    }
    for i, run_input in enumerate(inputs):
        request = {
            "session_id": "s1",
            "start": {"flow": "keeper", "key": f"k{i}", "input": copy.deepcopy(run_input)},
            "session": session,
        }
        session = (await agent.turn(request)).session.model_dump(mode="json")
    return session


def containers(value: Any, out: dict[int, Any]) -> dict[int, Any]:
    """Every dict and list inside ``value`` (models included), by id."""
    if isinstance(value, Session | Claim) or hasattr(value, "__pydantic_fields_set__"):
        for name in type(value).model_fields:
            containers(getattr(value, name), out)
    elif isinstance(value, dict):
        out[id(value)] = value
        for item in value.values():
            containers(item, out)
    elif isinstance(value, list):
        out[id(value)] = value
        for item in value:
            containers(item, out)
    return out


INPUTS = [
    {"message": "oi", "id": "m1"},
    {"event": "go", "key": "e1"},
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=nested, run_inputs=st.lists(nested, min_size=0, max_size=3))
@pytest.mark.parametrize("given_as", ["dict", "object"])
@pytest.mark.parametrize("spec", INPUTS, ids=["message", "event"])
def test_a_turn_never_writes_the_session_it_was_given(
    given_as: str, spec: dict[str, Any], data: dict[str, Any], run_inputs: list[dict[str, Any]]
) -> None:
    async def play() -> None:
        agent = build(FakeClock(START))
        stored = await stored_session(agent, data, run_inputs)
        session: Any = stored if given_as == "dict" else migrate_session(stored)
        before = copy.deepcopy(stored) if given_as == "dict" else session.model_dump()
        theirs = containers(session, {})
        request = {"session_id": "s1", "session": session, **spec}
        result = await agent.turn(request)
        assert result.changed
        after = session if given_as == "dict" else session.model_dump()
        assert after == before
        # Nothing the caller holds is part of the result: a host may keep both.
        assert not set(containers(result.session, {})) & set(theirs)
        # And a second turn on the same input still finds what the first one found.
        again = await agent.turn(request)
        assert again.model_dump() == result.model_dump()

    asyncio.run(play())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=nested, run_inputs=st.lists(nested, min_size=0, max_size=3))
def test_the_copy_equals_the_round_trip(
    data: dict[str, Any], run_inputs: list[dict[str, Any]]
) -> None:
    async def make() -> Any:
        return await stored_session(build(FakeClock(START)), data, run_inputs)

    session = migrate_session(asyncio.run(make()))
    copied = copy_session(session)
    round_trip = Session.model_validate(session.model_dump())
    assert copied == round_trip == session
    assert copied.model_fields_set == round_trip.model_fields_set
    assert [r.model_fields_set for r in copied.runs] == [
        r.model_fields_set for r in round_trip.runs
    ]
    assert copied.model_dump(mode="json") == round_trip.model_dump(mode="json")
    assert not set(containers(copied, {})) & set(containers(session, {}))


def test_a_session_edited_by_hand_is_normalised_as_before() -> None:
    """Times assigned after validation (naive, another zone) or a run given as a dict come
    out of the copy as validation leaves them, as the round trip did."""
    session = Session.model_validate(
        {
            "id": "s1",
            "runs": [{"id": "r1", "flow_id": "f", "step_id": "a", "started_at": START}],
            "claims": {"flow:f": {"at": START}},
        }
    )
    session.last_user_at = datetime(2026, 1, 5, 9)
    session.runs[0].started_at = datetime(2026, 1, 5, 6, tzinfo=timezone(timedelta(hours=-3)))
    copied = copy_session(session)
    assert copied.last_user_at == datetime(2026, 1, 5, 9, tzinfo=UTC)
    assert copied.last_user_at.tzinfo is UTC and copied.runs[0].started_at.tzinfo is UTC
    assert copied == Session.model_validate(session.model_dump())

    as_dict = session.model_copy(deep=True)
    as_dict.runs = [
        {"id": "r1", "flow_id": "f", "step_id": "a", "started_at": START}  # type: ignore[list-item]
    ]
    with pytest.warns(UserWarning, match="Expected `Run`"):  # the round trip's own warning
        copied = copy_session(as_dict)
    assert type(copied.runs[0]).__name__ == "Run"
    assert copied.runs[0].started_at == datetime(2026, 1, 5, 9, tzinfo=UTC)
