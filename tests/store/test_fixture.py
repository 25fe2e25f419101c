"""The PostgreSQL fixture other test packages rely on."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from sqlalchemy.engine import make_url

from store import Store, migrate


def test_database_url_names_a_fresh_migrated_database(database_url: str) -> None:
    """The session database is uniquely named and already at the newest migration."""
    assert str(make_url(database_url).database).startswith("turnflow_t_")
    assert database_url.startswith("postgresql://")


async def test_store_starts_with_empty_tables(store: Store) -> None:
    """Each test's store sees no sessions, outbox rows or timers left by another test."""
    assert await store.outbox_backlog() == 0
    assert await store.timers_pending() == 0
    assert (await store.load("anyone")).version == 0


def test_migrations_are_at_head(database_url: str) -> None:
    """The fixture migrated the database to the head revision."""
    head = migrate.head()
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(migrate.current, database_url).result() == head
