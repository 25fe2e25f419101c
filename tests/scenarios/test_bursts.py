"""Bursts: several customer messages answered as one turn by the engine.

A host that finds more messages of a session waiting passes the earlier ones as ``burst`` and
the last as ``message``. The turn makes at most the usual model calls, records every id,
shows each message to the model and drops the ones the session already had.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine import Agent, FakeClock, MockProvider, TurnResult
from engine.errors import TurnRequestError
from tests.scenarios.support import START, codes

FIELDS: dict[str, Any] = {
    "day": {"type": "string", "ask": "Which day?"},
    "party": {"type": "integer", "ask": "For how many?"},
}
BOOKING = {
    "id": "booking",
    "on": [{"message": ["book a table"]}],
    "steps": [
        {"id": "ask", "collect": ["day", "party"]},
        {"id": "done", "say": "Booked."},
    ],
}
OTHER = {"id": "other", "on": [{"message": ["cancel"]}], "steps": [{"id": "x", "say": "Gone."}]}


def build(provider: Any) -> Agent:
    """The clock stands a few seconds after START, where the bursts' messages are dated (an
    input dated after the clock would be read as now)."""
    clock = FakeClock(START)
    clock.advance(seconds=5)
    return Agent(
        name="Ana", provider=provider, clock=clock, fields=FIELDS,
        flows=[BOOKING, OTHER], idle="silent",
    )


def burst(session_id: str, parts: list[tuple[str, str]], session: Any = None) -> dict[str, Any]:
    """A message request carrying ``parts`` (text, id) as one burst, the last as message."""
    *earlier, (text, last_id) = parts
    return {
        "session_id": session_id,
        "burst": [
            {"message": t, "id": i, "at": f"2026-01-05T09:00:0{n}Z"}
            for n, (t, i) in enumerate(earlier)
        ],
        "message": text,
        "id": last_id,
        "at": f"2026-01-05T09:00:0{len(earlier)}Z",
        "session": session,
    }


async def asking(agent: Agent, session_id: str = "s1") -> TurnResult:
    """A booking run that asks for the day and the party size (speak call scripted)."""
    return await agent.turn({"session_id": session_id, "message": "book a table", "id": "m0"})


def test_a_burst_is_one_turn_with_one_understand_and_one_speak() -> None:
    """Three messages in one turn: understand and speak see all three, one reply, ids recorded."""
    provider = MockProvider([
        {"flows": {"booking": 90, "other": 0}},
        {"message": "For which day and how many?", "day": None, "party": None},
        {"flows": {"booking": 0, "other": 0}},
        {"message": "Booked for friday, four people.", "day": "friday", "party": 4},
    ])
    agent = build(provider)

    async def go() -> tuple[TurnResult, TurnResult]:
        first = await agent.turn({"session_id": "s1", "message": "hello", "id": "m0"})
        second = await agent.turn(burst(
            "s1",
            [("hi", "m1"), ("I want to change my booking", "m2"), ("friday, four of us", "m3")],
            first.session,
        ))
        return first, second

    _, second = asyncio.run(go())
    assert second.llm_calls <= 2
    assert [c.schema_name for c in provider.calls[2:]] == ["understand", "speak"]
    for call in provider.calls[2:]:
        for text in ("hi", "I want to change my booking", "friday, four of us"):
            assert text in call.system
            assert text in call.meta["message"]
        user_entries = [m.text for m in call.messages if m.role == "user"]
        assert user_entries[-3:] == ["hi", "I want to change my booking", "friday, four of us"]
    assert second.session.data == {"day": "friday", "party": 4}
    assert second.session.inputs[-3:] == ["m1", "m2", "m3"]
    assert second.session.last_user_at is not None
    assert second.session.last_user_at.isoformat().startswith("2026-01-05T09:00:02")
    assert [m.kind for m in second.messages].count("ai") == 1  # one reply to the burst


def test_a_burst_of_ids_the_session_already_had_is_a_duplicate() -> None:
    """Every id already in the session: duplicate-input, nothing sent, no model call."""
    provider = MockProvider([
        {"flows": {"booking": 0, "other": 0}},
    ])
    agent = build(provider)

    async def go() -> TurnResult:
        first = await agent.turn(burst("s1", [("a", "m1"), ("b", "m2")]))
        return await agent.turn(burst("s1", [("a", "m1"), ("b", "m2")], first.session))

    again = asyncio.run(go())
    assert codes(again) == ["duplicate-input"]
    assert again.messages == [] and again.llm_calls == 0
    assert len(provider.calls) == 1


def test_the_already_seen_messages_of_a_burst_are_dropped_and_the_rest_answered() -> None:
    """A burst overlapping an answered one keeps only its new message for the model."""
    provider = MockProvider([
        {"flows": {"booking": 0, "other": 0}},
        {"flows": {"booking": 0, "other": 0}},
    ])
    agent = build(provider)

    async def go() -> TurnResult:
        first = await agent.turn(burst("s1", [("alpha", "m1"), ("beta", "m2")]))
        return await agent.turn(
            burst("s1", [("alpha", "m1"), ("beta", "m2"), ("gamma", "m3")], first.session)
        )

    second = asyncio.run(go())
    assert "duplicate-input" not in codes(second)
    last = provider.calls[-1]
    assert last.meta["message"] == "gamma"
    assert "alpha" not in last.system
    assert second.session.inputs == ["m1", "m2", "m3"]


def test_a_burst_repeating_an_id_within_itself_answers_it_once() -> None:
    """The same id twice in one burst: the second copy is dropped, the id recorded once."""
    provider = MockProvider([{"flows": {"booking": 0, "other": 0}}])
    agent = build(provider)
    result = asyncio.run(agent.turn(burst("s1", [("one", "m1"), ("one", "m1"), ("two", "m2")])))
    assert result.session.inputs == ["m1", "m2"]
    assert provider.calls[0].meta["message"] == "one\ntwo"


def test_a_burst_without_a_message_is_refused_with_a_reason() -> None:
    """A burst on a wake names what is wrong and never echoes the text."""
    agent = build(MockProvider([]))
    request = {"session_id": "s1", "wake": "k", "burst": [{"message": "secret words"}]}
    try:
        asyncio.run(agent.turn(request))
    except TurnRequestError as exc:
        assert "burst" in str(exc)
        assert "secret words" not in str(exc)
    else:
        raise AssertionError("a burst on a wake was accepted")


def test_a_single_message_request_dumps_as_before() -> None:
    """A request without a burst has no burst key in its dump: stored inputs stay as they were."""
    from engine.request import TurnRequest

    request = TurnRequest.parse({"session_id": "s1", "message": "hi", "id": "m1"})
    assert "burst" not in request.model_dump(mode="json")
    assert request.input_ids == ["m1"]


def test_many_sessions_bursting_at_once_keep_their_own_messages() -> None:
    """Twenty sessions burst concurrently through one agent: each one's data and ids are its own."""

    class Echo:
        """Answers understand with the session's own day, read from its own messages."""

        async def generate(self, request: Any) -> Any:
            from engine import ModelResponse

            if request.schema_name == "understand":
                return ModelResponse(json={"flows": {"booking": 0}})
            said = request.meta["message"] or ""
            day = said.split()[-1] if said.startswith("hi") else None
            return ModelResponse(json={"message": f"Noted {day}.", "day": day, "party": 2})

    agent = Agent(
        name="Ana", provider=Echo(), clock=FakeClock(START), fields=FIELDS,
        flows=[BOOKING], idle="silent",
    )

    async def one(n: int) -> TurnResult:
        first = await agent.turn({"session_id": f"s{n}", "message": "book a table", "id": "m0"})
        return await agent.turn(burst(
            f"s{n}", [("hi", f"a{n}"), ("for two", f"b{n}"), (f"on day{n}", f"c{n}")],
            first.session,
        ))

    async def all_of_them() -> list[TurnResult]:
        return await asyncio.gather(*(one(n) for n in range(20)))

    results = asyncio.run(all_of_them())
    for n, result in enumerate(results):
        assert result.session.id == f"s{n}"
        assert result.session.data["day"] == f"day{n}"
        assert result.session.inputs[-3:] == [f"a{n}", f"b{n}", f"c{n}"]
        assert [m.text for m in result.messages] == [f"Noted day{n}.", "Booked."]


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    burst=st.one_of(
        _json_values,
        st.lists(st.fixed_dictionaries(
            {"message": st.text(max_size=30)},
            optional={"id": st.one_of(st.none(), st.text(max_size=10)), "at": _json_values},
        ), max_size=5),
    )
)
def test_any_burst_a_host_sends_is_answered_or_refused_with_a_reason(burst: Any) -> None:
    """Whatever a host puts in ``burst``, the turn runs or raises TurnRequestError; nothing
    else escapes, and a refusal never echoes a message's text."""
    provider = MockProvider([{"flows": {"booking": 0, "other": 0}}])
    agent = build(provider)
    request = {"session_id": "s1", "message": "last words", "id": "m-last", "burst": burst}
    try:
        result = asyncio.run(agent.turn(request))
    except TurnRequestError as exc:
        assert "last words" not in str(exc)
        return
    assert "m-last" in result.session.inputs
