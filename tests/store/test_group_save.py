"""Group commit: many sessions' turns in one statement, each with exactly its own outcome.

``Store.save_turns`` must give every request what ``save_turn`` gives it alone — the same
version, the same outbox rows in the same order, the same error — with many conversations in
one statement and nothing of one reaching another.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from store import (
    AlreadyApplied,
    ConsumedInput,
    DuplicateInput,
    SavedTurn,
    SaveRequest,
    SourceRecord,
    Store,
    VersionConflict,
    direct,
    jsoncodec,
)
from tests.store.builders import save_request


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    sent: list[str] = []
    monkeypatch.setattr(direct, "statement_listeners", [sent.append])
    yield sent


async def _outbox(store: Store, session_id: str) -> list[tuple[int, dict[str, Any]]]:
    async with store.engine.connect() as connection:
        rows = await connection.execute(
            text("SELECT id, payload FROM outbox WHERE session_id = :s ORDER BY id"),
            {"s": session_id},
        )
        return [(int(r.id), jsoncodec.loads(r.payload)) for r in rows]


async def test_forty_sessions_in_one_statement(store: Store, statements: list[str]) -> None:
    """New and existing sessions together: one statement, each its own version and rows."""
    for n in range(0, 40, 2):
        await store.save_turn(save_request(f"s{n}", 0, outbox=1))
    statements.clear()
    requests = [
        save_request(f"s{n}", 1 if n % 2 == 0 else 0, outbox=1 + n % 3,
                     source=SourceRecord("inbound.turns", n % 4, 1000 + n))
        for n in range(40)
    ]
    results = await store.save_turns(requests)
    assert len(statements) == 1
    for n, result in enumerate(results):
        assert isinstance(result, SavedTurn), (n, result)
        assert result.version == (2 if n % 2 == 0 else 1)
        assert len(result.outbox_ids) == 1 + n % 3
        rows = await _outbox(store, f"s{n}")
        mine = [row for row in rows if row[0] in result.outbox_ids]
        # Its own rows, in write order, carrying its own payloads and no one else's.
        assert [row[0] for row in mine] == sorted(result.outbox_ids)
        assert [row[1] for row in mine] == [p.payload for p in requests[n].outbox]
    every = [i for r in results if isinstance(r, SavedTurn) for i in r.outbox_ids]
    assert len(every) == len(set(every))


async def test_a_stale_version_fails_alone(store: Store, statements: list[str]) -> None:
    await store.save_turn(save_request("a", 0))
    await store.save_turn(save_request("b", 0))
    results = await store.save_turns([save_request("a", 1), save_request("b", 7)])
    assert isinstance(results[0], SavedTurn) and results[0].version == 2
    assert isinstance(results[1], VersionConflict) and results[1].found == 1
    assert (await store.load("b")).version == 1


async def test_a_replay_among_them_gets_its_own_answer(store: Store) -> None:
    """A record already in the log aborts the statement; each request then saves alone."""
    source = SourceRecord("inbound.turns", 0, 42)
    await store.save_turn(save_request("a", 0, source=source))
    results = await store.save_turns([
        save_request("b", 0, source=SourceRecord("inbound.turns", 0, 43)),
        save_request("a", 1, source=source),
        save_request("c", 0, input_id="m1"),
    ])
    assert isinstance(results[0], SavedTurn)
    assert isinstance(results[1], AlreadyApplied) and results[1].offset == 42
    assert isinstance(results[2], SavedTurn)
    assert (await store.load("a")).version == 1
    assert (await store.load("c")).version == 1


async def test_a_burst_keeps_its_earlier_records(store: Store) -> None:
    earlier = SourceRecord("inbound.turns", 1, 7)
    request = save_request("a", 0, source=SourceRecord("inbound.turns", 1, 8), input_id="m2")
    burst = SaveRequest(
        session_id=request.session_id,
        expected_version=0,
        state=request.state,
        turn=_with_earlier(request, (ConsumedInput(earlier, "m1"),)),
        outbox=request.outbox,
    )
    results = await store.save_turns([burst, save_request("b", 0)])
    assert all(isinstance(r, SavedTurn) for r in results)
    loaded = await store.load("a", sources=[earlier], input_ids=["m1"])
    assert loaded.applied and loaded.duplicate


def _with_earlier(request: SaveRequest, earlier: tuple[ConsumedInput, ...]) -> Any:
    from dataclasses import replace

    return replace(request.turn, earlier=earlier)


# -- the same outcome as alone, whatever the mix ----------------------------------------------

_KINDS = st.sampled_from(["new", "next", "stale", "replay", "duplicate-id"])


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kinds=st.lists(_KINDS, min_size=2, max_size=8))
async def test_group_and_alone_agree(store: Store, kinds: list[str]) -> None:
    """Two namespaces get the same history; then the same requests are saved as a group in one
    and one by one in the other. Outcomes, versions and rows written agree."""
    run = uuid.uuid4().hex[:8]

    def build(space: str) -> list[SaveRequest]:
        return [_request(f"{space}-{run}-{n}", kind, f"t.{space}.{run}", n)
                for n, kind in enumerate(kinds)]

    for space in ("group", "alone"):
        for n, kind in enumerate(kinds):
            if kind != "new":
                await store.save_turn(_request(f"{space}-{run}-{n}", "new", f"t.{space}.{run}", n))
    grouped = await store.save_turns(build("group"))
    alone: list[Any] = []
    for request in build("alone"):
        try:
            alone.append(await store.save_turn(request))
        except (VersionConflict, AlreadyApplied, DuplicateInput) as error:
            alone.append(error)
    assert [type(r) for r in grouped] == [type(r) for r in alone]
    for g, a in zip(grouped, alone, strict=True):
        if isinstance(g, SavedTurn):
            assert isinstance(a, SavedTurn)
            assert g.version == a.version and len(g.outbox_ids) == len(a.outbox_ids)
    for n in range(len(kinds)):
        g_loaded = await store.load(f"group-{run}-{n}")
        a_loaded = await store.load(f"alone-{run}-{n}")
        assert g_loaded.version == a_loaded.version
        assert g_loaded.unpublished == a_loaded.unpublished


def _request(session_id: str, kind: str, topic: str, n: int) -> SaveRequest:
    """`new` creates the session; the others run against a session created by a `new` first:
    `next` is the following turn, `stale` a turn computed from a version long gone, `replay`
    the creating record again, `duplicate-id` the creating input's id at a new offset."""
    if kind == "new":
        return save_request(session_id, 0, outbox=2, source=SourceRecord(topic, 0, n),
                            input_id=f"id-{n}")
    if kind == "next":
        return save_request(session_id, 1, source=SourceRecord(topic, 0, 100 + n),
                            input_id=f"id2-{n}")
    if kind == "stale":
        return save_request(session_id, 5, source=SourceRecord(topic, 0, 200 + n))
    if kind == "replay":
        return save_request(session_id, 1, source=SourceRecord(topic, 0, n))
    return save_request(session_id, 1, source=SourceRecord(topic, 0, 300 + n),
                        input_id=f"id-{n}")
