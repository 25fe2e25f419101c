"""Each turn's history entries are written by its save (``turns.history``) and read back as they
are; a row saved before that column existed (NULL there) gives the very same entries, built by
the load. Whatever a turn's input and messages hold, the history is the one the transcript rules
give (store/history.py): a burst's earlier messages, the message, then each message sent, the
last ``history_limit`` of them, oldest first."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from engine.history import _parse_at
from store import SaveRequest, Store
from tests.store.builders import save_request

# Text jsonb can hold: no NUL, no lone surrogates.
_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                max_size=12)
_at = st.one_of(
    st.none(),
    st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat()),
    _text,
    st.integers(min_value=-10, max_value=10),
)
_part = st.one_of(
    st.fixed_dictionaries({}, optional={"message": st.one_of(st.none(), _text), "at": _at,
                                        "id": _text}),
    _text,
    st.integers(),
)
_input = st.one_of(
    st.fixed_dictionaries(
        {"message": st.one_of(st.none(), _text)},
        optional={"at": _at, "burst": st.one_of(st.lists(_part, max_size=3), _text)},
    ),
    st.fixed_dictionaries({"wake": _text}),
)
_sent = st.lists(
    st.fixed_dictionaries({"kind": st.just("ai")}, optional={"text": st.one_of(st.none(), _text)}),
    max_size=3,
)
_turn = st.tuples(_input, _sent, st.booleans())  # input, messages sent, created_at given


def _expected(turns: list[tuple[dict[str, Any], list[dict[str, Any]], datetime]],
              limit: int) -> list[dict[str, Any]]:
    """The transcript rules, written plainly: what the load must give for ``turns``."""
    entries: list[dict[str, Any]] = []

    def at_of(holder: Any, created: datetime) -> Any:
        given = holder.get("at") if isinstance(holder, dict) else None
        return _parse_at(given) if given is not None else created

    for turn_input, sent, created in turns:
        if "message" in turn_input:
            burst = turn_input.get("burst")
            for part in burst if isinstance(burst, list) else []:
                text = part.get("message") if isinstance(part, dict) else None
                entries.append({"role": "user", "text": text, "at": at_of(part, created)})
            entries.append(
                {"role": "user", "text": turn_input["message"], "at": at_of(turn_input, created)}
            )
        for message in sent:
            entries.append({"role": "assistant", "text": message.get("text"), "at": created})
    return entries[-limit:] if limit else []


def _turn_save(session_id: str, version: int, turn_input: dict[str, Any],
               sent: list[dict[str, Any]], created_at: datetime | None) -> SaveRequest:
    base = save_request(session_id, version - 1, message=None)
    turn = dataclasses.replace(
        base.turn, input={"session_id": session_id, **turn_input}, messages=sent,
        created_at=created_at,
    )
    return dataclasses.replace(base, turn=turn)


async def _rows(store: Store, session_id: str) -> list[tuple[int, datetime, Any]]:
    async with store.engine.connect() as connection:
        rows = await connection.execute(
            text("SELECT version, created_at, history FROM turns WHERE session_id = :s"
                 " ORDER BY version"),
            {"s": session_id},
        )
        return [(r.version, r.created_at, r.history) for r in rows]


async def _forget_entries(store: Store, session_id: str, up_to_version: int | None = None) -> None:
    """Make rows look as if saved before migration 0011: no entries stored."""
    async with store.engine.connect() as connection:
        await connection.execute(
            text("UPDATE turns SET history = NULL WHERE session_id = :s"
                 " AND (CAST(:v AS bigint) IS NULL OR version <= :v)"),
            {"s": session_id, "v": up_to_version},
        )


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(_turn, min_size=1, max_size=6), limit=st.integers(0, 12),
       grouped=st.booleans())
async def test_stored_entries_are_the_ones_the_load_would_build(
    store: Store, turns: list[tuple[dict[str, Any], list[dict[str, Any]], bool]], limit: int,
    grouped: bool,
) -> None:
    """Any turns, saved alone or in a group save: the stored entries, the entries the load
    builds for old rows and the transcript rules agree, entry for entry."""
    session_id = f"h-{uuid.uuid4().hex}"
    for version, (turn_input, sent, dated) in enumerate(turns, start=1):
        created = datetime(2026, 3, 1, 12, version, 30, 250000, tzinfo=UTC) if dated else None
        request = _turn_save(session_id, version, turn_input, sent, created)
        if grouped:
            (saved,) = await store.save_turns([request])
            assert not isinstance(saved, Exception), saved
        else:
            await store.save_turn(request)
    rows = await _rows(store, session_id)
    assert all(history is not None for _, _, history in rows), "a save left no entries"
    written = [(i, s, created) for (i, s, _), (_, created, _) in zip(turns, rows, strict=True)]
    expected = _expected(written, limit)

    stored = (await store.load(session_id, history_limit=limit)).history
    await _forget_entries(store, session_id)
    built = (await store.load(session_id, history_limit=limit)).history
    assert stored == built == expected


async def test_rows_from_before_the_column_and_after_it_read_as_one_history(store: Store) -> None:
    """A conversation whose first turns were saved before the column existed: their entries
    (built by the load) come first, then the stored ones, in order."""
    for version in range(1, 6):
        await store.save_turn(save_request("s1", version - 1, message=f"u{version}",
                                           replies=[f"a{version}"]))
        if version == 3:
            await _forget_entries(store, "s1", up_to_version=3)
    assert [history is None for _, _, history in await _rows(store, "s1")] == [
        True, True, True, False, False
    ]
    history = (await store.load("s1", history_limit=7)).history
    assert [e["text"] for e in history] == ["a2", "u3", "a3", "u4", "a4", "u5", "a5"]
    assert [e["role"] for e in history] == ["assistant", *["user", "assistant"] * 3]


async def test_the_column_holds_the_turn_entries_as_text_and_times(store: Store) -> None:
    """What the save writes: one object per entry, the turn's time where the input gave none."""
    created = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    request = _turn_save("s1", 1, {"message": "oi", "burst": [{"message": "antes",
                                                               "at": "2026-03-01T11:59:00Z"}]},
                         [{"kind": "ai", "text": "olá"}, {"kind": "ai", "text": "tudo bem?"}],
                         created)
    await store.save_turn(request)
    ((_, _, stored),) = await _rows(store, "s1")
    entries = stored if isinstance(stored, list) else json.loads(stored)
    assert [(e["role"], e["text"]) for e in entries] == [
        ("user", "antes"), ("user", "oi"), ("assistant", "olá"), ("assistant", "tudo bem?")
    ]
    assert entries[0]["at"] == "2026-03-01T11:59:00Z"
    assert all(_parse_at(e["at"]) == created for e in entries[1:])


async def test_forty_conversations_saved_together_each_read_only_their_own(store: Store) -> None:
    """Forty conversations saved in group saves, turn after turn: each history holds exactly its
    own entries, whether stored or built for old rows."""
    ids = [f"c{n}" for n in range(40)]
    for version in range(1, 4):
        requests = [
            save_request(sid, version - 1, message=f"{sid} u{version}",
                         replies=[f"{sid} a{version}"])
            for sid in ids
        ]
        halves = [requests[::2], requests[1::2]]
        results = await asyncio.gather(*(store.save_turns(half) for half in halves))
        assert not any(isinstance(r, Exception) for rs in results for r in rs)
    for n, sid in enumerate(ids):
        if n % 2:
            await _forget_entries(store, sid, up_to_version=2)
        history = (await store.load(sid, history_limit=10)).history
        assert [e["text"] for e in history] == [
            f"{sid} {kind}{v}" for v in range(1, 4) for kind in ("u", "a")
        ], sid
