"""Dead letters kept in full: any bytes, kept once per source, read back as they were."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from consumer.failures import cannot_succeed
from store import DeadLetterRecord, SourceRecord, Store


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


# -- retention ---------------------------------------------------------------------------------


async def _age(database_url: str, table: str, days: float, where: str) -> None:
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute(
            f"UPDATE {table} SET created_at = now() - make_interval(days => {days}) "
            f"WHERE {where}"
        )
    finally:
        await connection.close()


async def _count(database_url: str, table: str) -> int:
    connection = await asyncpg.connect(database_url)
    try:
        return int(await connection.fetchval(f"SELECT count(*) FROM {table}"))
    finally:
        await connection.close()


async def _poison(store: Store, database_url: str, sessions: int) -> None:
    """For each of ``sessions`` conversations, a kept 600 KB record and two dead-lettered
    sources, and a refused record naming no conversation (session id ''). The first half of
    the conversations and the refused record came 40 days ago, the rest a day ago (kept
    records) or just now (sources)."""
    for n in range(sessions):
        if n == sessions // 2:
            await _age(database_url, "dead_letters", 40, "true")
            await _age(database_url, "dead_lettered_sources", 40, "true")
        await store.keep_dead_letter(DeadLetterRecord(
            source=f"in:0:{n}", topic="dlq", reason="too-large", detail="d",
            key=f"s{n}".encode(), value=b"x" * 600_000,
        ))
        await store.record_dead_lettered(
            f"s{n}", [SourceRecord("in", 1, 2 * n), SourceRecord("in", 1, 2 * n + 1)], "r"
        )
        if n == 0:
            await store.record_dead_lettered("", [SourceRecord("in", 2, 0)], "not-json")
    await _age(database_url, "dead_letters", 1, f"substr(source, 6)::int >= {sessions // 2}")


async def test_dead_letters_past_their_retention_are_deleted_oldest_first(
    store: Store, database_url: str
) -> None:
    """Kept records and dead-lettered sources stored longer ago than the retention are deleted,
    in batches, the refused record naming no conversation included; the newer ones of the
    other conversations stay."""
    await _poison(store, database_url, 10)
    assert await store.prune_dead_letters(older_than=timedelta(days=30), batch=2) == (5, 11)
    assert await _count(database_url, "dead_letters") == 5
    assert await _count(database_url, "dead_lettered_sources") == 10
    assert not await store.is_dead_lettered(SourceRecord("in", 1, 0))
    assert not await store.is_dead_lettered(SourceRecord("in", 2, 0))
    assert await store.is_dead_lettered(SourceRecord("in", 1, 10))
    assert await _count(database_url, "dead_letters WHERE source = 'in:0:5'") == 1
    assert await store.prune_dead_letters(older_than=timedelta(days=30)) == (0, 0)


async def test_the_relay_and_the_prune_command_apply_the_dead_letter_retention(
    store: Store, database_url: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The relay's pass deletes what is past ``dead_letter_retention``; ``turnflow prune``
    does with ``DEAD_LETTER_RETENTION_DAYS`` (0 keeps) or ``--dead-letters-older-than-days``."""
    import asyncio

    from consumer.cli import main
    from consumer.relay import OutboxRelay

    await _poison(store, database_url, 4)
    relay = OutboxRelay(None, store, interval_s=1, grace_s=1,  # type: ignore[arg-type]
                        dead_letter_retention=timedelta(days=30))
    assert await relay.prune() == (0, 0, 2 + 5)
    assert await _count(database_url, "dead_letters") == 2

    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("DEAD_LETTER_RETENTION_DAYS", "0")
    assert await asyncio.to_thread(main, ["prune"]) == 0
    assert "no dead letter deleted" in capsys.readouterr().out
    assert await _count(database_url, "dead_letters") == 2
    monkeypatch.setenv("DEAD_LETTER_RETENTION_DAYS", "0.5")
    assert await asyncio.to_thread(main, ["prune"]) == 0
    assert "deleted 2 kept dead letters and 0 dead-lettered sources" in capsys.readouterr().out
    assert await asyncio.to_thread(main, ["prune", "--dead-letters-older-than-days", "0"]) == 0
    assert "deleted 0 kept dead letters and 4 dead-lettered sources" in capsys.readouterr().out
    assert await _count(database_url, "dead_letters") == 0
    assert await _count(database_url, "dead_lettered_sources") == 0
