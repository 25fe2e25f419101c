"""Properties of every code-only turn, over generated input sequences (hypothesis).

No turn mutates its input; ``changed`` is false exactly when the seed says; a replayed input id
never changes the session.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Agent, FakeClock, MockProvider, TurnResult, ok
from tests.scenarios.support import START

IGNORED = (["duplicate-input"], ["no-session"], ["stale-wake"])

FLOWS: list[dict[str, Any]] = [
    {
        "id": "welcome",
        "on": [{"message": []}],
        "steps": [
            {"id": "hi", "say": "Oi {{nome}}", "once": True},
            {"id": "note", "do": "note", "with": {"who": "{{nome}}"}},
            {"id": "wait", "wait": {"ms": 120_000}, "else": "back"},
            {"id": "nudge", "say": "Ainda aí?", "then": "end"},
            {"id": "back", "if": {"known": "nome"}, "then": "named", "else": "end"},
            {"id": "named", "say": "Bem-vinda de volta"},
        ],
    },
    {
        "id": "paid",
        "on": [{"event": "payment", "after_ms": 5000}],
        "repeat": {"cooldown_ms": 60_000},
        "steps": [
            {"id": "thanks", "say": "Pagamento recebido"},
            {"id": "w", "wait": {"event": "shipped", "up_to_ms": 600_000}, "else": "late"},
            {"id": "ok", "say": "Enviado", "then": "end"},
            {"id": "late", "say": "Atrasou"},
        ],
    },
    {
        "id": "nudge",
        "on": [{"silence": 300_000}],
        "repeat": "once",
        "steps": [{"id": "n", "say": "Posso ajudar em algo mais?"}],
    },
    {"id": "promo", "steps": [{"id": "p", "say": "Promo!", "then": {"flow": "welcome"}}]},
]


def build(clock: FakeClock) -> Agent:
    return Agent(
        name="Ana",
        provider=MockProvider([]),
        clock=clock,
        fields={"nome": {"type": "string"}},
        flows=FLOWS,
        actions={"note": lambda ctx: ok()},
        events={"payment": {}, "shipped": {}},
        idle="silent",
    )


inputs = st.one_of(
    st.builds(lambda i: {"message": "oi", "id": f"m{i}"}, st.integers(0, 4)),
    st.just({"message": "sem id"}),
    st.builds(lambda i: {"wake": i}, st.integers(0, 3)),
    st.builds(
        lambda name, i, out: {
            "event": name,
            "key": f"e{i}",
            "direction": "outbound" if out else "inbound",
        },
        st.sampled_from(["payment", "shipped", "other"]),
        st.integers(0, 4),
        st.booleans(),
    ),
    st.builds(
        lambda flow, i: {"start": {"flow": flow, "key": f"k{i}"}},
        st.sampled_from(["promo", "welcome", "gone"]),
        st.integers(0, 3),
    ),
)
steps = st.lists(st.tuples(inputs, st.integers(0, 400_000)), min_size=1, max_size=12)


def run(sequence: list[tuple[dict[str, Any], int]], check: Any) -> None:
    """Play a sequence of inputs, storing the session as JSON between turns like a host."""

    async def play() -> None:
        clock = FakeClock(START)
        agent = build(clock)
        stored: dict[str, Any] | None = None
        wakes: list[str] = []
        for spec, advance_ms in sequence:
            clock.advance(ms=advance_ms)
            request: dict[str, Any] = {"session_id": "s1", "session": stored, **spec}
            if "wake" in spec:
                index = spec["wake"]
                request["wake"] = wakes[index % len(wakes)] if wakes else f"r9:x:{index}"
            before = copy.deepcopy(request)
            result = await agent.turn(request)
            check(request, before, result, stored)
            assert result.llm_calls == 0
            assert all(r.status != "running" for r in result.session.runs)
            wakes.extend(entry.key for entry in result.schedule)
            stored = result.session.model_dump(mode="json")

    asyncio.run(play())


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(steps)
def test_no_turn_mutates_its_input(sequence: list[tuple[dict[str, Any], int]]) -> None:
    """The session you passed is deep-copied; the input is never mutated."""

    def check(request: Any, before: Any, result: TurnResult, stored: Any) -> None:
        assert request == before

    run(sequence, check)


@PROPERTY
@given(steps)
def test_changed_is_false_exactly_when_the_seed_says(
    sequence: list[tuple[dict[str, Any], int]],
) -> None:
    """changed is false when the input was ignored — a repeated message id, a wake with no
    session, a wake nothing is waiting for — or when the session came back identical with no
    message, no wake, no outcome and no skip to show for the turn."""

    def check(request: Any, before: Any, result: TurnResult, stored: Any) -> None:
        codes = [o.code for o in result.outcomes]
        ignored = codes in IGNORED
        # With no session passed, the fresh session always gains at least an input id or a
        # timestamp, so "identical" can only hold against a stored session.
        same = stored is not None and result.session.model_dump(mode="json") == stored
        nothing = not (result.messages or result.schedule or result.outcomes or result.skipped)
        assert result.changed is not (ignored or (same and nothing))
        if ignored:
            assert result.messages == [] and result.schedule == []
            if stored is not None:
                assert result.session.model_dump(mode="json") == stored

    run(sequence, check)


@PROPERTY
@given(steps)
def test_a_replayed_input_id_never_changes_the_session(
    sequence: list[tuple[dict[str, Any], int]],
) -> None:
    """An id the session already saw is dropped: code: 'duplicate-input', changed: false."""

    async def replay() -> None:
        clock = FakeClock(START)
        agent = build(clock)
        stored: dict[str, Any] | None = None
        for spec, advance_ms in sequence:
            clock.advance(ms=advance_ms)
            if "wake" in spec:
                continue
            request = {"session_id": "s1", "session": stored, **spec}
            result = await agent.turn(request)
            stored = result.session.model_dump(mode="json")
            if "message" in spec and "id" not in spec:
                continue
            again = await agent.turn({**request, "session": stored})
            assert again.changed is False
            assert [o.code for o in again.outcomes] == ["duplicate-input"]
            assert again.session.model_dump(mode="json") == stored
            assert again.messages == [] and again.schedule == [] and again.llm_calls == 0

    asyncio.run(replay())


@PROPERTY
@given(steps)
def test_every_saved_session_round_trips(sequence: list[tuple[dict[str, Any], int]]) -> None:
    """Session.model_dump(mode="json") round-trips through migrate_session exactly."""
    from engine import migrate_session

    def check(request: Any, before: Any, result: TurnResult, stored: Any) -> None:
        dump = result.session.model_dump(mode="json")
        assert migrate_session(copy.deepcopy(dump)).model_dump(mode="json") == dump

    run(sequence, check)


@PROPERTY
@given(steps)
def test_the_same_inputs_replay_to_the_same_results(
    sequence: list[tuple[dict[str, Any], int]],
) -> None:
    """Code behaves the same on a replay; ids derive from the session, never uuid or random."""
    seen: list[list[dict[str, Any]]] = []
    for _ in range(2):
        results: list[dict[str, Any]] = []

        def check(
            request: Any, before: Any, result: TurnResult, stored: Any, out: Any = results
        ) -> None:
            out.append(result.model_dump(mode="json"))

        run(sequence, check)
        seen.append(results)
    assert seen[0] == seen[1]
