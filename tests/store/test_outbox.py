"""Fetching and publishing outbox rows: locking, order, and marks that commit with the batch."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import asyncpg
import pytest

from store import Store
from tests.store.builders import save_request


async def _payloads(store: Store, **fetch: object) -> list[tuple[str, int, int]]:
    async with store.fetch_unpublished(**fetch) as batch:  # type: ignore[arg-type]
        return [(r.session_id, r.payload["version"], r.payload["n"]) for r in batch.rows]


async def test_fetch_returns_unpublished_rows_oldest_first(store: Store) -> None:
    """Rows come back in write order across sessions, with topic, key and payload."""
    await store.save_turn(save_request("s1", 0, outbox=2))
    await store.save_turn(save_request("s2", 0, outbox=1))
    await store.save_turn(save_request("s1", 1, outbox=1))
    assert await _payloads(store) == [("s1", 1, 0), ("s1", 1, 1), ("s2", 1, 0), ("s1", 2, 0)]
    async with store.fetch_unpublished(limit=1) as batch:
        (row,) = batch.rows
    assert (row.topic, row.key) == ("outbound.messages", "s1")


async def test_fetch_for_one_session_returns_only_its_rows(store: Store) -> None:
    """`session_id=` restricts the fetch to that session's rows."""
    await store.save_turn(save_request("s1", 0, outbox=2))
    await store.save_turn(save_request("s2", 0, outbox=2))
    assert {s for s, _, _ in await _payloads(store, session_id="s2")} == {"s2"}


async def test_marked_rows_are_not_fetched_again(store: Store) -> None:
    """Rows marked published inside the batch leave the backlog when the batch commits."""
    await store.save_turn(save_request("s1", 0, outbox=3))
    assert await store.outbox_backlog() == 3
    async with store.fetch_unpublished(limit=2) as batch:
        assert await batch.mark_published() == 2
    assert await store.outbox_backlog() == 1
    assert await _payloads(store) == [("s1", 1, 2)]


async def test_a_failed_publish_leaves_rows_unpublished(store: Store) -> None:
    """When the publishing block raises, its marks roll back and the rows are fetched again."""
    await store.save_turn(save_request("s1", 0, outbox=2))
    with pytest.raises(RuntimeError):
        async with store.fetch_unpublished() as batch:
            await batch.mark_published()
            raise RuntimeError("broker went away")
    assert await store.outbox_backlog() == 2


async def test_mark_published_by_id(store: Store) -> None:
    """`mark_published(ids)` marks exactly those rows, once."""
    saved = await store.save_turn(save_request("s1", 0, outbox=3))
    assert await store.mark_published(saved.outbox_ids[:2]) == 2
    assert await store.mark_published(saved.outbox_ids[:2]) == 0
    assert await store.outbox_backlog() == 1


async def test_two_publishers_never_hold_the_same_row(store: Store) -> None:
    """A second publisher skips the rows the first has locked instead of waiting for them."""
    for n in range(4):
        await store.save_turn(save_request(f"s{n}", 0, outbox=1))
    async with store.fetch_unpublished(limit=2) as first:
        second_rows = await asyncio.wait_for(_payloads(store), timeout=10)
        first_sessions = {r.session_id for r in first.rows}
    assert first_sessions == {"s0", "s1"}
    assert {s for s, _, _ in second_rows} == {"s2", "s3"}


async def test_a_session_newer_rows_wait_while_its_older_rows_are_held(store: Store) -> None:
    """A publisher never gets a session's row while an older row of it is held by another."""
    await store.save_turn(save_request("s1", 0, outbox=2))
    await store.save_turn(save_request("s2", 0, outbox=1))
    await store.save_turn(save_request("s1", 1, outbox=1))
    async with store.fetch_unpublished(limit=1) as first:
        assert [r.payload["n"] for r in first.rows] == [0]
        assert await _payloads(store) == [("s2", 1, 0)]
        assert await _payloads(store, session_id="s1") == []
        await first.mark_published()
    assert await _payloads(store, session_id="s1") == [("s1", 1, 1), ("s1", 2, 0)]


async def _age(database_url: str, ids: list[int], seconds: float) -> None:
    """Make rows look written `seconds` ago by the database clock."""
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute(
            "UPDATE outbox SET created_at = now() - make_interval(secs => $2)"
            " WHERE id = ANY($1::bigint[])", ids, float(seconds)
        )
    finally:
        await connection.close()


async def test_the_relay_fetch_takes_only_old_rows_and_keeps_each_session_a_prefix(
    store: Store, database_url: str
) -> None:
    """`older_than` takes rows older than that by the database clock; a session's rows after
    its first young row stay out, so what goes out is still a prefix of the session."""
    s1_old = (await store.save_turn(save_request("s1", 0, outbox=1))).outbox_ids
    await store.save_turn(save_request("s1", 1, outbox=1))  # young: its writer sends it
    s1_later = (await store.save_turn(save_request("s1", 2, outbox=1))).outbox_ids
    s2_old = (await store.save_turn(save_request("s2", 0, outbox=2))).outbox_ids
    await _age(database_url, s1_old + s1_later + s2_old, 60)
    assert await _payloads(store, older_than=timedelta(seconds=10)) == [
        ("s1", 1, 0), ("s2", 1, 0), ("s2", 1, 1)
    ]
    assert len(await _payloads(store, older_than=timedelta(seconds=0))) == 5


async def test_the_relay_fetch_leaves_young_rows_unlocked(
    store: Store, database_url: str
) -> None:
    """While the relay holds its batch (as across its sends), a consumer's mark of its own
    young row does not wait for it: the relay never locked that row."""
    old = (await store.save_turn(save_request("crashed", 0, outbox=1))).outbox_ids
    young = (await store.save_turn(save_request("live", 0, outbox=1))).outbox_ids
    await _age(database_url, old, 60)
    async with store.fetch_unpublished(older_than=timedelta(seconds=10)) as batch:
        assert [r.id for r in batch.rows] == old
        connection = await asyncpg.connect(database_url)
        try:
            # The statement `PublishedMarks` runs; a lock held by the relay would time out.
            await connection.execute("SET lock_timeout = '2s'")
            marked = await connection.execute(
                "UPDATE outbox SET published_at = now()"
                " WHERE id = ANY($1::bigint[]) AND published_at IS NULL", young
            )
        finally:
            await connection.close()
        assert marked == "UPDATE 1"
        await batch.mark_published()
    assert await store.outbox_backlog() == 0


async def test_delete_published_drops_only_old_published_rows(
    store: Store, database_url: str
) -> None:
    """Published rows older than the cut-off go; recent and unpublished rows stay."""
    saved = await store.save_turn(save_request("s1", 0, outbox=3))
    old, recent, _ = saved.outbox_ids
    await store.mark_published([old, recent])
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute(
            "UPDATE outbox SET published_at = now() - interval '2 days' WHERE id = $1", old
        )
        assert await store.delete_published(older_than=timedelta(days=1)) == 1
        remaining = [r["id"] for r in await connection.fetch("SELECT id FROM outbox ORDER BY id")]
    finally:
        await connection.close()
    assert remaining == saved.outbox_ids[1:]
    assert await store.outbox_backlog() == 1


async def test_delete_published_goes_in_batches_and_never_takes_an_unpublished_row(
    store: Store, database_url: str
) -> None:
    """Many conversations' rows published long ago go in batches of `batch`; their
    conversations' unpublished rows, however old, and rows published recently all stay."""
    ids: dict[str, list[int]] = {}
    for n in range(12):
        ids[f"s{n}"] = (await store.save_turn(save_request(f"s{n}", 0, outbox=3))).outbox_ids
    published = [i for row in ids.values() for i in row[:2]]
    await store.mark_published(published)
    old = [row[0] for row in ids.values()]
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute(
            "UPDATE outbox SET published_at = now() - interval '9 days'"
            " WHERE id = ANY($1::bigint[])", old
        )
        await connection.execute("UPDATE outbox SET created_at = now() - interval '9 days'")
        assert await store.delete_published(older_than=timedelta(days=7), batch=5) == 12
        remaining = {r["id"] for r in await connection.fetch("SELECT id FROM outbox")}
    finally:
        await connection.close()
    assert remaining == {i for row in ids.values() for i in row[1:]}
    assert await store.outbox_backlog() == 12
    assert await store.delete_published(older_than=timedelta(days=7), batch=5) == 0
