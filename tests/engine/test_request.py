"""TurnRequest validation and Session migration (engine/request.py, engine/session.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import Session, TurnRequest, TurnRequestError, migrate_session


@pytest.mark.parametrize(
    "raw",
    [
        {"session_id": "s1"},
        {"session_id": "s1", "message": "oi", "wake": "k"},
        {"session_id": "s1", "event": "paid"},
        {"session_id": "s1", "message": "oi", "surprise": 1},
        {"message": "oi"},
    ],
)
def test_exactly_one_valid_input_kind(raw: dict[str, object]) -> None:
    """Exactly one input kind: message, wake, event (with a key) or start."""
    with pytest.raises(TurnRequestError) as caught:
        TurnRequest.parse(raw)
    assert caught.value.session_id == raw.get("session_id")


def test_input_ids_per_kind() -> None:
    """Messages are remembered by id, events and starts by key; wakes are not remembered."""
    assert TurnRequest.parse({"session_id": "s", "message": "x", "id": "m1"}).input_id == "m1"
    assert TurnRequest.parse({"session_id": "s", "message": "x"}).input_id is None
    assert TurnRequest.parse({"session_id": "s", "wake": "k"}).input_id is None
    event = TurnRequest.parse({"session_id": "s", "event": "e", "key": "k1"})
    assert (event.kind, event.input_id) == ("event", "event:k1")
    start = TurnRequest.parse({"session_id": "s", "start": {"flow": "f", "key": "k2"}})
    assert (start.kind, start.input_id) == ("start", "start:k2")
    parsed = TurnRequest.parse({"session_id": "s", "message": "x", "at": "2026-01-05T09:00:00"})
    assert parsed.at == datetime(2026, 1, 5, 9, tzinfo=UTC)
    assert TurnRequest.parse(parsed) is parsed


def test_v4_dump_round_trips_and_older_shapes_upgrade() -> None:
    """Session.model_dump(mode="json") round-trips through migrate_session exactly."""
    session = Session(id="s1", data={"n": 1.5, "b": True}, inputs=["a"])
    dump = session.model_dump(mode="json")
    assert migrate_session(dump).model_dump(mode="json") == dump
    copy = migrate_session(session)
    assert copy == session and copy is not session
    legacy = migrate_session(
        {
            "id": "s1",
            "claims": {
                "promo": {"at": "2026-01-01T00:00:00Z", "count": 2},
                "say:f/x": {"at": "2026-01-01T00:00:00Z"},
            },
            "runs": [{"id": "r1", "flowId": "f", "stepId": "a", "status": "done"}],
            "inputs": [str(i) for i in range(60)],
        }
    )
    assert legacy.claims["flow:promo"].count == 2 and "say:f/x" in legacy.claims
    assert legacy.runs[0].status == "asking" and legacy.runs[0].visit == 1
    assert len(legacy.inputs) == 50 and legacy.inputs[0] == "10"


@pytest.mark.parametrize(
    "at",
    ["card 4111111111111111 cvv 123", "9999-12-31T23:00:00-05:00", "0001-01-01T00:30:00+01:00"],
)
def test_a_bad_at_is_refused_by_field_without_quoting_it(at: str) -> None:
    """An `at` that is not a time, or leaves years 1-9999 once moved to UTC, is a
    TurnRequestError naming the field, never the text it held."""
    with pytest.raises(TurnRequestError) as caught:
        TurnRequest.parse({"session_id": "s1", "message": "oi", "at": at})
    assert str(caught.value).startswith("invalid turn request: at: ")
    assert "4111" not in str(caught.value) and at not in str(caught.value)


@pytest.mark.parametrize("raw_id", ["", "event:pay-77", "start:k2"])
@pytest.mark.parametrize("where", ["message", "burst"])
def test_a_message_id_that_is_empty_or_looks_like_another_kinds_is_refused(
    raw_id: str, where: str
) -> None:
    """An empty message id would be remembered and make the next message with the same empty
    id a duplicate; ``event:``/``start:`` ids would be taken for an event's or start's key.
    Both are refused by field, with neither quoted."""
    raw: dict[str, object] = {"session_id": "s1", "message": "oi", "id": "m2"}
    if where == "message":
        raw["id"] = raw_id
    else:
        raw["burst"] = [{"message": "hi", "id": raw_id}]
    with pytest.raises(TurnRequestError) as caught:
        TurnRequest.parse(raw)
    field = "id" if where == "message" else "burst.0.id"
    assert str(caught.value).startswith(f"invalid turn request: {field}: ")
    assert "pay-77" not in str(caught.value)


async def test_an_event_after_a_message_whose_id_names_it_is_still_applied() -> None:
    """The message could not have taken the event's place in ``session.inputs``: the engine
    refused its id, so the event with that key runs."""
    from engine import Agent

    agent = Agent(name="A", events={"paid": {}}, flows=[{"id": "paid", "on": [{"event": "paid"}],
                                    "steps": [{"id": "s", "say": "thanks"}]}])
    with pytest.raises(TurnRequestError):
        await agent.turn({"session_id": "s1", "message": "oi", "id": "event:pay-77"})
    result = await agent.turn({"session_id": "s1", "event": "paid", "key": "pay-77"})
    assert [o.code for o in result.outcomes if o.code == "duplicate-input"] == []
    assert [m.text for m in result.messages] == ["thanks"]


@pytest.mark.parametrize(
    "session", [{"claims": "0"}, {"runs": 1}, {"runs": [None]}, {"runs": ["x"]}, {"inputs": 1.0}]
)
def test_a_damaged_older_session_is_an_invalid_request(session: dict[str, object]) -> None:
    """An older-shape session whose claims, runs or inputs are not the values the upgrade
    reads is refused by field (a ``TurnRequestError``, dead-lettered at once), not a
    ``TypeError`` out of the upgrade (retried as a failed turn)."""
    with pytest.raises(ValueError):
        migrate_session(dict(session))
    with pytest.raises(TurnRequestError, match="invalid turn request: session: "):
        TurnRequest.parse({"session_id": "s1", "message": "oi", "session": dict(session)})


async def test_a_stored_time_after_the_clock_is_read_as_now() -> None:
    """A session saying the assistant spoke in year 9999 (a host's bad row, a skewed clock)
    would overflow the silence wake set from it on every turn; it is read as now."""
    from engine import Agent, FakeClock

    agent = Agent(name="A", clock=FakeClock("2026-01-05T09:00:00Z"), events={"x": {}},
                  flows=[{"id": "nudge", "on": [{"silence": 5000}],
                          "steps": [{"id": "n", "say": "still there?"}]}])
    result = await agent.turn({
        "session_id": "s1", "event": "x", "key": "k1",
        "session": {"id": "s1", "v": 4, "last_assistant_at": "9999-12-31T23:59:59Z",
                    "last_user_at": "9999-12-31T23:59:58Z"},
    })
    now = datetime(2026, 1, 5, 9, tzinfo=UTC)
    assert result.session.last_assistant_at == now and result.session.last_user_at == now
    assert [(s.at - now).total_seconds() for s in result.schedule] == [5.0]


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
_SESSION_KEYS = st.sampled_from([
    "id", "v", "version", "data", "runs", "claims", "inputs", "metadata", "last_user_at",
    "last_assistant_at", "lastUserAt", "flowId", "status", "startedAt",
])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_SESSION_KEYS, _JSONISH | st.lists(
    st.dictionaries(_SESSION_KEYS, _JSONISH, max_size=4), max_size=2), max_size=6))
def test_any_stored_session_upgrades_or_is_refused_with_a_value_error(raw: dict[str, Any]) -> None:
    """Whatever a stored row holds, ``migrate_session`` gives a ``Session`` or raises a
    ``ValueError`` (pydantic's ``ValidationError`` is one), which a turn reports as an invalid
    request; nothing else escapes."""
    try:
        session = migrate_session(dict(raw))
    except ValueError:
        return
    assert isinstance(session, Session)
