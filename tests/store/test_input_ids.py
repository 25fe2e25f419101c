"""Duplicate inputs per conversation: the turn log's (session, input id) index, at load and save."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store import DuplicateInput, SourceRecord, Store, VersionConflict
from store.input_ids import stored_input_id
from tests.store.builders import save_request


def _unescape(stored: str) -> str:
    """The inverse of the escape, written independently to show it loses nothing."""
    out, i = [], 0
    while i < len(stored):
        if stored[i] != "%":
            out.append(stored[i])
            i += 1
        elif stored.startswith("%25", i):
            out.append("%")
            i += 3
        elif stored.startswith("%00", i):
            out.append("\x00")
            i += 3
        else:
            assert stored.startswith("%u", i), stored
            out.append(chr(int(stored[i + 2 : i + 6], 16)))
            i += 6
    return "".join(out)


@given(st.text(alphabet=st.characters(codec=None)))
def test_stored_ids_are_text_safe_and_one_to_one(raw: str) -> None:
    """Any id, NUL and lone surrogates included, is stored in a form PostgreSQL text holds,
    and two ids share a stored form only when they are equal."""
    stored = stored_input_id(raw)
    if not raw:
        assert stored is None
        return
    assert stored is not None
    assert "\x00" not in stored
    stored.encode("utf-8")  # no lone surrogate left
    assert _unescape(stored) == raw


def test_plain_ids_are_stored_as_they_are() -> None:
    """Ids without %, NUL or surrogates (the usual case) are kept readable, unchanged."""
    assert stored_input_id("m1") == "m1"
    assert stored_input_id("event:paid-7") == "event:paid-7"
    assert stored_input_id("a\x00b") == "a%00b"
    assert stored_input_id("a\ufffdb") == "a\ufffdb"
    assert stored_input_id(None) is None


async def test_load_reports_an_input_id_the_session_already_had(store: Store) -> None:
    """After many later turns, the load still finds an early input id of the same session."""
    await store.save_turn(save_request("s1", 0, input_id="m1", source=SourceRecord("in", 0, 1)))
    for n in range(1, 80):
        await store.save_turn(save_request("s1", n, input_id=f"m{n + 1}"))
    replayed = await store.load("s1", source=SourceRecord("in", 0, 999), input_id="m1")
    assert replayed.duplicate and not replayed.applied
    fresh = await store.load("s1", source=SourceRecord("in", 0, 999), input_id="m999")
    assert not fresh.duplicate
    assert not (await store.load("s1", input_id=None)).duplicate


async def test_input_ids_are_per_conversation(store: Store) -> None:
    """Two conversations may both use id "m1"; each is a first in its own session."""
    await store.save_turn(save_request("s1", 0, input_id="m1"))
    assert not (await store.load("s2", input_id="m1")).duplicate
    await store.save_turn(save_request("s2", 0, input_id="m1"))
    assert (await store.load("s2", input_id="m1")).duplicate


async def test_save_refuses_a_repeated_input_id_and_writes_nothing(store: Store) -> None:
    """A second turn with the same input id in a session raises DuplicateInput; the session,
    the turn log and the outbox are unchanged."""
    await store.save_turn(save_request("s1", 0, input_id="m1", state={"n": 1}))
    with pytest.raises(DuplicateInput) as raised:
        await store.save_turn(save_request("s1", 1, input_id="m1", state={"n": 2}, outbox=2))
    assert raised.value.session_id == "s1"
    assert "m1" not in str(raised.value)
    loaded = await store.load("s1")
    assert (loaded.version, loaded.state, loaded.unpublished) == (1, {"n": 1}, 1)


async def test_ids_with_nul_are_deduplicated_exactly(store: Store) -> None:
    """An id with NUL is saved and found again as itself, distinct from the U+FFFD spelling."""
    await store.save_turn(save_request("s1", 0, input_id="m\x001"))
    assert (await store.load("s1", input_id="m\x001")).duplicate
    assert not (await store.load("s1", input_id="m\ufffd1")).duplicate
    await store.save_turn(save_request("s1", 1, input_id="m\ufffd1"))
    with pytest.raises(DuplicateInput):
        await store.save_turn(save_request("s1", 2, input_id="m\x001"))


async def test_wakes_and_id_less_inputs_are_never_duplicates(store: Store) -> None:
    """Turns without an input id (wakes, messages without id) may repeat freely."""
    for n in range(3):
        await store.save_turn(save_request("s1", n, message=None))
    assert (await store.load("s1")).version == 3


async def test_concurrent_copies_of_one_input_save_once(store: Store) -> None:
    """Copies of one input racing in many conversations at once: one save per conversation."""
    sessions = [f"c{i}" for i in range(12)]
    for sid in sessions:
        await store.save_turn(save_request(sid, 0, input_id="start:k"))

    async def save(sid: str, offset: int) -> str:
        try:
            await store.save_turn(
                save_request(sid, 1, input_id="m1", source=SourceRecord("in", 0, offset))
            )
        except DuplicateInput:
            return "duplicate"
        except VersionConflict:  # a copy that lost the race on the version check
            return "conflict"
        return "saved"

    results = await asyncio.gather(
        *(save(sid, i * 3 + n) for i, sid in enumerate(sessions) for n in range(3))
    )
    for i, sid in enumerate(sessions):
        mine = results[i * 3 : i * 3 + 3]
        assert mine.count("saved") == 1, (sid, mine)
        assert (await store.load(sid, input_id="m1")).duplicate
        assert (await store.load(sid)).version == 2
