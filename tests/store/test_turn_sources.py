"""Burst turns in the store: every record and id a turn consumed is found again, exactly."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from store import (
    AlreadyApplied,
    ConsumedInput,
    DuplicateInput,
    SaveRequest,
    SourceRecord,
    Store,
)
from tests.store.builders import save_request


def _src(offset: int, partition: int = 0) -> SourceRecord:
    return SourceRecord("inbound.turns", partition, offset)


def burst_save(
    session_id: str, expected: int, parts: list[tuple[str, str | None, SourceRecord]]
) -> SaveRequest:
    """A save of one burst turn answering ``parts`` (text, id, record), the last as message."""
    *earlier, (text, last_id, last_source) = parts
    base = save_request(
        session_id, expected, message=text, replies=["one reply"], source=last_source,
        input_id=last_id,
    )
    turn_input = dict(base.turn.input)
    turn_input["burst"] = [{"message": t, "id": i} for t, i, _ in earlier]
    turn = dataclasses.replace(
        base.turn,
        input=turn_input,
        earlier=tuple(ConsumedInput(s, i) for _, i, s in earlier),
    )
    return dataclasses.replace(base, turn=turn)


async def test_a_burst_turn_makes_each_record_and_id_known(store: Store) -> None:
    """After saving a burst of three, a load asking about any of its records or ids finds it,
    in the one load statement, and reports which of a mixed set are new."""
    await store.save_turn(burst_save("s1", 0, [
        ("hi", "m1", _src(10)), ("change my booking", "m2", _src(11)), ("friday", "m3", _src(12)),
    ]))
    loaded = await store.load(
        "s1", sources=[_src(10), _src(11), _src(12)], input_ids=["m1", "m2", "m3"]
    )
    assert loaded.applied and loaded.duplicate
    assert loaded.applied_sources == {_src(10), _src(11), _src(12)}
    mixed = await store.load("s1", sources=[_src(11), _src(13)], input_ids=["m2", "m9"])
    assert not mixed.applied and not mixed.duplicate
    assert mixed.applied_sources == {_src(11)}
    assert mixed.duplicate_ids == {"m2"}
    assert await store.is_applied("inbound.turns", 0, 10)
    single = await store.load("s1", source=_src(10), input_id="m1")
    assert single.applied and single.duplicate
    other = await store.load("s2", input_ids=["m1"])
    assert not other.duplicate  # ids are per conversation


async def test_history_keeps_each_message_of_a_burst_as_its_own_entry(store: Store) -> None:
    """A burst turn yields one user entry per message, in order, then the reply."""
    await store.save_turn(burst_save("s1", 0, [
        ("hi", "m1", _src(1)), ("change my booking", "m2", _src(2)), ("friday", "m3", _src(3)),
    ]))
    loaded = await store.load("s1", history_limit=10)
    assert [(e["role"], e["text"]) for e in loaded.history] == [
        ("user", "hi"), ("user", "change my booking"), ("user", "friday"),
        ("assistant", "one reply"),
    ]


async def test_saving_a_record_or_id_a_burst_already_consumed_writes_nothing(
    store: Store,
) -> None:
    """A later turn repeating an earlier burst record raises AlreadyApplied, one repeating an
    earlier burst id raises DuplicateInput; the session stays at its version."""
    await store.save_turn(burst_save("s1", 0, [
        ("a", "m1", _src(1)), ("b", "m2", _src(2)),
    ]))
    with pytest.raises(AlreadyApplied):
        await store.save_turn(burst_save("s1", 1, [
            ("x", "m7", _src(1)), ("y", "m8", _src(8)),
        ]))
    with pytest.raises(DuplicateInput):
        await store.save_turn(burst_save("s1", 1, [
            ("x", "m1", _src(7)), ("y", "m8", _src(8)),
        ]))
    loaded = await store.load("s1")
    assert loaded.version == 1


async def test_many_conversations_saving_bursts_at_once_keep_their_own_entries(
    store: Store,
) -> None:
    """Thirty sessions save bursts with the same ids concurrently: each one's history and
    duplicate answers are its own."""

    async def one(n: int) -> None:
        await store.save_turn(burst_save(f"c{n}", 0, [
            (f"hi {n}", "m1", _src(n * 10 + 1, n % 3)),
            (f"bye {n}", "m2", _src(n * 10 + 2, n % 3)),
        ]))

    await asyncio.gather(*(one(n) for n in range(30)))
    for n in range(30):
        loaded = await store.load(
            f"c{n}", sources=[_src(n * 10 + 1, n % 3)], input_ids=["m1", "m2"], history_limit=5
        )
        assert loaded.applied and loaded.duplicate
        assert [e["text"] for e in loaded.history if e["role"] == "user"] == [f"hi {n}", f"bye {n}"]
