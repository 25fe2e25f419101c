"""Dead letters kept in full: any bytes, kept once per source, read back as they were."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from consumer.failures import cannot_succeed
from store import DeadLetterRecord, Store


async def test_a_record_is_kept_whole_and_once_per_source(store: Store) -> None:
    """Key, value and headers come back byte for byte, whatever they hold, and keeping the
    same source again returns the same row instead of a second one."""
    value = bytes(range(256)) * 5000  # ~1.3 MB, every byte value, not UTF-8
    letter = DeadLetterRecord(
        source="inbound.turns:3:17", topic="inbound.turns.dlq", reason="too-large",
        detail="value is 1280000 bytes, limit 65536", key=b"s-\x00\xff",
        value=value, headers=[("trace", b"\x00\x01"), ("b-sur\ud800", b"x")],
    )
    first = await store.keep_dead_letter(letter)
    again = await store.keep_dead_letter(letter)
    assert first == again
    kept = await store.dead_letter(first)
    assert kept is not None
    assert (kept.key, kept.value, kept.reason) == (b"s-\x00\xff", value, "too-large")
    assert [v for _, v in kept.headers] == [b"\x00\x01", b"x"]
    assert kept.headers[0][0] == "trace"
    other = await store.keep_dead_letter(
        DeadLetterRecord(source="outbox:9", topic="outbound.messages", reason="too-large",
                         detail="d", key=None, value=None)
    )
    assert other != first
    assert await store.dead_letter(other + 1000) is None


@pytest.mark.parametrize("text_value", ["k-\x00", "b-sur\ud800sid"])
async def test_what_postgresql_refuses_is_classed_unfixable(store: Store, text_value: str) -> None:
    """The errors PostgreSQL and its driver really raise for NUL and lone surrogates in text,
    and for a time pushed out of range, are the ones the shared classification refuses at
    once; a good statement on the same pool still runs after them."""
    async with store.engine.connect() as connection:
        with pytest.raises(DBAPIError) as caught:
            await connection.execute(text("SELECT CAST(:v AS text)"), {"v": text_value})
    assert cannot_succeed(caught.value) == "unstorable-text"
    async with store.engine.connect() as connection:
        with pytest.raises(DBAPIError) as overflow:
            await connection.execute(
                text("SELECT CAST(:at AS timestamptz) + interval '1000 years'"),
                {"at": "294276-12-31T00:00:00Z"},
            )
    assert cannot_succeed(overflow.value) in ("out-of-range", "invalid-data")
    async with store.engine.connect() as connection:
        assert (await connection.execute(text("SELECT 1"))).scalar() == 1
