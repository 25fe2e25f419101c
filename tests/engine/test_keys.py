"""Keys the engine mints are unique across conversations, deterministic, and name their
conversation; sessions stored with the old per-session keys keep working."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import (
    Agent,
    FakeClock,
    MockProvider,
    ProviderError,
    TurnResult,
    defer,
    ok,
)
from engine.keys import burst_lineage, run_id, run_key, session_key, session_of, session_tag
from tests.scenarios.support import START

FLOWS: list[dict[str, Any]] = [
    {
        "id": "order",
        "on": [{"message": []}],
        "steps": [
            {"id": "hi", "say": "Oi!", "once": True},
            {"id": "book", "do": "book"},
            {"id": "wait", "wait": {"ms": 120_000}, "else": "back"},
            {"id": "nudge", "say": "Ainda aí?", "then": "end"},
            {"id": "back", "say": "Que bom."},
        ],
    },
    {
        "id": "paid",
        "on": [{"event": "payment", "after_ms": 5000}],
        "steps": [
            {"id": "thanks", "say": "Pago."},
            {"id": "w", "wait": {"event": "shipped", "up_to_ms": 600_000}, "else": "late"},
            {"id": "ok", "say": "Enviado", "then": "end"},
            {"id": "late", "say": "Atrasou"},
        ],
    },
    {"id": "nudge", "on": [{"silence": 300_000}], "steps": [{"id": "n", "say": "Mais algo?"}]},
    {"id": "promo", "steps": [{"id": "p", "say": "Promo!", "then": {"flow": "order"}}]},
]

INPUTS = st.one_of(
    st.builds(lambda i: {"message": "oi", "id": f"m{i}"}, st.integers(0, 4)),
    st.builds(lambda i: {"wake": i}, st.integers(0, 5)),
    st.builds(
        lambda name, i: {"event": name, "key": f"e{i}"},
        st.sampled_from(["payment", "shipped"]),
        st.integers(0, 3),
    ),
    st.builds(lambda i: {"start": {"flow": "promo", "key": f"k{i}"}}, st.integers(0, 2)),
)
SEQUENCES = st.lists(st.tuples(INPUTS, st.integers(0, 400_000)), min_size=1, max_size=10)
# Session ids as channels make them, and hostile ones: separators, escapes, other scripts.
SESSION_IDS = st.lists(
    st.one_of(
        st.sampled_from(["s1", "s1:x", "s1%3Ax", "a@b", "r1", "wa:5511999", "ç", "~", "a/b"]),
        st.text(min_size=1, max_size=12),
    ),
    min_size=2,
    max_size=6,
    unique=True,
)


def agent(clock: FakeClock, booked: list[tuple[str, str]]) -> Agent:
    """Code-only agent whose action defers once per key, then books (recording ``ctx.key``)."""
    seen: set[str] = set()

    def book(ctx: Any) -> Any:
        booked.append((ctx.session_id, ctx.key))
        if ctx.key not in seen:
            seen.add(ctx.key)
            return defer(ms=30_000)
        return ok()

    return Agent(
        name="Ana",
        provider=MockProvider([]),
        clock=clock,
        flows=FLOWS,
        actions={"book": book},
        events={"payment": {}, "shipped": {}},
        idle="silent",
    )


def minted(result: TurnResult) -> set[str]:
    """Every key and run id a result carries out of the engine."""
    keys = {m.key for m in result.messages} | {e.key for e in result.schedule}
    keys |= {e.replaces for e in result.schedule if e.replaces}
    keys |= {r.id for r in result.session.runs} | {c.run_id for c in result.started}
    keys |= {r.waiting.key for r in result.session.runs if r.waiting}
    return keys


async def conversation(
    session_id: str, sequence: list[tuple[dict[str, Any], int]]
) -> tuple[set[str], list[dict[str, Any]]]:
    """Play ``sequence`` for one session like a host; return its keys and its results."""
    clock = FakeClock(START)
    booked: list[tuple[str, str]] = []
    bot = agent(clock, booked)
    stored: dict[str, Any] | None = None
    wakes: list[str] = []
    keys: set[str] = set()
    results: list[dict[str, Any]] = []
    for spec, advance_ms in sequence:
        clock.advance(ms=advance_ms)
        request: dict[str, Any] = {"session_id": session_id, "session": stored, **spec}
        if "wake" in spec:
            request["wake"] = wakes[spec["wake"] % len(wakes)] if wakes else "none"
        result = await bot.turn(request)
        keys |= minted(result)
        wakes.extend(e.key for e in result.schedule)
        stored = result.session.model_dump(mode="json")
        results.append(result.model_dump(mode="json"))
    assert all(owner == session_id for owner, _ in booked)
    keys |= {key for _, key in booked}
    return keys, results


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SESSION_IDS, SEQUENCES)
def test_no_key_is_minted_in_two_conversations(
    session_ids: list[str], sequence: list[tuple[dict[str, Any], int]]
) -> None:
    """Many conversations of one agent fed the same inputs mint disjoint keys, every key names
    its own conversation, and replaying a conversation mints the same keys again."""

    async def play() -> None:
        owners: dict[str, str] = {}
        for session_id in session_ids:
            keys, results = await conversation(session_id, sequence)
            for key in keys:
                assert session_of(key) == session_id, key
                assert owners.setdefault(key, session_id) == session_id, key
            again_keys, again = await conversation(session_id, sequence)
            assert (again_keys, again) == (keys, results)

    asyncio.run(play())


@given(st.text(), st.text())
def test_the_session_tag_is_one_to_one(a: str, b: str) -> None:
    """Two session ids share a tag only when they are equal, and no tag holds ':' or '@'."""
    assert (session_tag(a) == session_tag(b)) == (a == b)
    assert ":" not in session_tag(a) and "@" not in session_tag(a)
    assert session_of(run_id(a, 7)) == a
    assert session_of(session_key("idle", a, "m:1:@")) == a


@given(st.one_of(st.text(), st.text(alphabet="ab-._~:@% 9Z\u00e9")))
def test_the_session_tag_is_the_id_percent_encoded(session_id: str) -> None:
    """The tag is the id's UTF-8 percent-encoding, also where an id that needs no escape is
    given back as it is."""
    encoded = quote(session_id.encode("utf-8", "surrogatepass"), safe="")
    assert session_tag(session_id) == encoded and type(session_tag(session_id)) is str


def test_keys_read_plainly_for_the_usual_ids() -> None:
    """A run id and the keys on it stay readable for plain ids; other characters are escaped."""
    assert run_id("wa-5511999", 3) == "r3@wa-5511999"
    assert run_id("wa:55 11", 1) == "r1@wa%3A55%2011"
    assert session_key("idle", "s1", "m7") == "idle@s1:m7"
    assert session_of("r1:greet:1") is None and session_of("silence:f:s1:5") is None


async def test_model_keys_of_two_conversations_differ() -> None:
    """Reply keys, retry keys and idle keys of two conversations on the same step differ."""

    def script(request: Any) -> Any:
        if request.schema_name == "understand":
            return {"flows": {"ask": 90 if "nome" in str(request.messages) else 0}}
        if "fail" in str(request.messages):
            raise ProviderError("busy", kind="retryable")
        return {"message": "Qual o seu nome?", "nome": None}

    flows = [
        {"id": "ask", "on": [{"message": ["nome"]}], "steps": [{"id": "q", "collect": ["nome"]}]}
    ]
    keys: dict[str, set[str]] = {}
    for session_id in ("a", "b"):
        clock = FakeClock(START)
        provider = MockProvider([script] * 10)
        bot = Agent(
            name="Ana",
            provider=provider,
            clock=clock,
            fields={"nome": {"type": "string"}},
            flows=flows,
            idle="Responda com educação.",
        )
        first = await bot.turn({"session_id": session_id, "message": "oi", "id": "m1"})
        assert [m.key.split(":")[0] for m in first.messages] == [f"idle@{session_id}"]
        second = await bot.turn(
            {"session_id": session_id, "message": "nome", "id": "m2", "session": first.session}
        )
        third = await bot.turn(
            {"session_id": session_id, "message": "fail", "id": "m3", "session": second.session}
        )
        assert third.schedule and third.messages == []
        keys[session_id] = minted(first) | minted(second) | minted(third)
        assert {session_of(k) for k in keys[session_id]} == {session_id}
    assert not keys["a"] & keys["b"]


async def test_a_session_stored_with_old_run_ids_keeps_working() -> None:
    """A session saved before run ids carried their conversation (``r1``, keys ``r1:wait:3``,
    silence keys ``silence:{flow}:{session}:{ms}``) is woken by its old keys, and its next runs
    get the new ids."""
    clock = FakeClock(START)
    bot = agent(clock, [])
    stored = {
        "id": "s1",
        "v": 4,
        "version": 3,
        "seq": 1,
        "data": {},
        "runs": [
            {
                "id": "r1",
                "flow_id": "order",
                "status": "waiting",
                "step_id": "wait",
                "visit": 3,
                "waiting": {"key": "r1:wait:3", "kind": "timer", "at": "2026-01-05T09:02:00Z"},
                "started_at": START,
            }
        ],
        "claims": {"flow:order": {"at": START}, "say:order/hi": {"at": START}},
        "inputs": ["m1"],
        "metadata": {},
        "last_assistant_at": START,
        "silence_wakes": {"nudge": "silence:nudge:s1:1767603600000"},
    }
    clock.set("2026-01-05T09:02:00Z")
    woke = await bot.turn({"session_id": "s1", "wake": "r1:wait:3", "session": stored})
    assert [o.code for o in woke.outcomes][:1] == ["no-reply"]
    assert [m.text for m in woke.messages] == ["Ainda aí?"]
    assert [m.key for m in woke.messages] == ["r1:nudge:4"]

    clock.set("2026-01-05T09:05:00Z")
    silence = await bot.turn(
        {"session_id": "s1", "wake": "silence:nudge:s1:1767603600000", "session": stored}
    )
    assert [s.flow_id for s in silence.started] == ["nudge"]
    assert [s.run_id for s in silence.started] == ["r2@s1"]


LINEAGES = st.one_of(st.just(""), st.binary(min_size=8, max_size=8).map(bytes.hex))


@settings(max_examples=300)
@given(session_id=st.text(), other=st.text(), lineage=LINEAGES, other_lineage=LINEAGES,
       local=st.text(), seq=st.integers(0, 10**6))
def test_keys_with_a_lineage_still_name_their_conversation(
    session_id: str, other: str, lineage: str, other_lineage: str, local: str, seq: int
) -> None:
    """A key minted after a burst (with a lineage) gives its session back, and never equals a
    key of another conversation or of another lineage, whatever the ids and local parts."""
    keys = [session_key("idle", session_id, local, lineage),
            run_key(run_id(session_id, seq), session_id, local, lineage)]
    if lineage:  # a run id from before tags gets its tag with the lineage
        keys.append(run_key(f"r{seq}", session_id, local, lineage))
    for key in keys:
        assert session_of(key) == session_id
        assert key != session_key("idle", other, local, other_lineage) or (
            other == session_id and other_lineage == lineage)
    if lineage != other_lineage:
        assert run_key(run_id(session_id, seq), session_id, local, lineage) != run_key(
            run_id(session_id, seq), session_id, local, other_lineage)


@given(previous=LINEAGES, version=st.integers(0, 10**9),
       parts=st.lists(st.tuples(st.none() | st.text(), st.none() | st.text(), st.text()),
                      min_size=2, max_size=4))
def test_a_burst_lineage_is_the_same_for_the_same_burst_and_hex(
    previous: str, version: int, parts: list[tuple[str | None, str | None, str]]
) -> None:
    """The lineage depends only on what it is given (a replay mints the same keys), is 16 hex
    digits (never an ``@`` or ``:``), and changes with the version or the messages."""
    lineage = burst_lineage(previous, version, parts)
    assert lineage == burst_lineage(previous, version, list(parts))
    assert len(lineage) == 16 and set(lineage) <= set("0123456789abcdef")
    assert lineage != burst_lineage(previous, version + 1, parts)
    assert lineage != burst_lineage(previous, version, parts[1:])
