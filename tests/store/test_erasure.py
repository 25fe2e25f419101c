"""Erasing a customer's conversation: gone from every table, others untouched, bills kept."""

from __future__ import annotations

import asyncio

import pytest

from store import Store
from tests.store.conversations import fill, scalar, table_rows

IDS = [f"+55119{n:04d}~" for n in range(24)]


def mentions(row: str, session_id: str) -> bool:
    """Whether a row's JSON holds the id, as text or as the bytes of a key (hex)."""
    return session_id in row or session_id.encode().hex() in row


async def test_erasing_one_of_many_leaves_the_others_row_for_row(
    store: Store, database_url: str
) -> None:
    """Twenty-four conversations filled at once; one erased: none of its text is left in any
    table, every other row is exactly as before, and the ledger's total is unchanged."""
    await asyncio.gather(*(fill(store, sid) for sid in IDS))
    victim = IDS[7]
    before = await table_rows(database_url)
    credits = await scalar(database_url, "SELECT sum(credits) FROM credit_ledger")

    done = await store.erase(session_id=victim)

    assert done.erased_ids == [victim]
    assert done.removed == {
        "sessions": 1, "turns": 3, "turn_recordings": 3, "turn_sources": 3, "outbox": 3,
        "timers": 1,
        "dead_lettered_sources": 2, "dead_letters": 1,
    }
    assert done.ledger_anonymised == 3
    after = await table_rows(database_url)
    for table, rows in after.items():
        assert not [r for r in rows if mentions(r, victim)], table
        if table not in ("credit_ledger", "erased_sessions"):
            assert rows == [r for r in before[table] if not mentions(r, victim)], table
    ledger_before = [r for r in before["credit_ledger"] if not mentions(r, victim)]
    assert set(ledger_before) <= set(after["credit_ledger"])
    assert len(after["credit_ledger"]) == len(before["credit_ledger"])
    assert await scalar(database_url, "SELECT sum(credits) FROM credit_ledger") == credits
    assert await scalar(database_url, "SELECT count(*) FROM dead_letters") == len(IDS) - 1
    assert len(after["erased_sessions"]) == 1
    assert list(await store.erased_among(IDS)) == [victim]


async def test_erasing_a_customer_takes_their_conversations_and_no_one_elses(
    store: Store, database_url: str
) -> None:
    """``customer=KEY`` erases KEY and KEY:<anything>, not an id that merely starts alike."""
    mine = ["+551100", "+551100:2026-11", "+551100:2026-12"]
    theirs = ["+5511000", "x+551100:1", "+55110"]
    await asyncio.gather(*(fill(store, sid, turns=2) for sid in mine + theirs))
    done = await store.erase(customer="+551100")
    assert done.erased_ids == sorted(mine)
    assert done.removed["sessions"] == 3 and done.removed["turns"] == 6
    left = await scalar(database_url, "SELECT array_agg(id ORDER BY id) FROM sessions")
    assert left == sorted(theirs)
    assert await scalar(database_url, "SELECT count(*) FROM turns") == 2 * len(theirs)
    assert set(await store.erased_among(mine + theirs)) == set(mine)


async def test_erasing_again_or_nothing_removes_nothing(store: Store) -> None:
    await fill(store, "a~")
    assert (await store.erase(session_id="a~")).anything
    again = await store.erase(session_id="a~")
    assert not again.anything and sum(again.removed.values()) == 0
    assert "a~" in await store.erased_among(["a~"])
    assert not (await store.erase(session_id="never~")).anything
    assert await store.erased_among(["never~"]) == {}


async def test_a_conversation_begun_again_under_an_erased_id_is_not_called_erased(
    store: Store,
) -> None:
    await fill(store, "again~")
    await store.erase(session_id="again~")
    await fill(store, "again~", turns=1)
    assert await store.erased_among(["again~"]) == {}


async def test_erasing_while_other_conversations_save(store: Store, database_url: str) -> None:
    """Saves of other conversations running during the erase all land; the erased one is gone
    whole (its session row lock orders the erase against its own saves)."""
    victim = "busy~"
    await fill(store, victim)
    others = [f"other-{n}~" for n in range(12)]
    await asyncio.gather(store.erase(session_id=victim),
                         *(fill(store, sid, turns=4) for sid in others))
    assert await scalar(database_url, "SELECT count(*) FROM turns") == 4 * len(others)
    assert await scalar(
        database_url, "SELECT count(*) FROM turns WHERE session_id = $1", victim) == 0


@pytest.mark.parametrize("bad", ["", "a\x00b", "x" * 1001, "\udc80"])
async def test_ids_no_row_can_hold_are_refused_with_a_reason(store: Store, bad: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        await store.erase(session_id=bad)
