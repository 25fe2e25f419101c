"""The migration benchmark at a small size: `turnflow migrate` from revision 0013 and from the
previous release's head to head, under a steady stream of turns through the store, delays no
turn more than 1 s beyond its usual latency, and every turn of the stream is saved."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import make_url

from bench.migrate_bench import BOUND_S, run_all
from store import migrate
from tests.store.migration_dbs import execute, off_loop

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture
def two_databases(database_url: str) -> Iterator[tuple[str, str]]:
    """A migrated database for the turn log and an empty one, dropped afterwards."""
    names = [f"turnflow_mb_{uuid.uuid4().hex[:10]}" for _ in range(2)]
    for name in names:
        execute(database_url, f'CREATE DATABASE "{name}"')
    urls = [make_url(database_url).set(database=n).render_as_string(hide_password=False)
            for n in names]
    try:
        off_loop(migrate.upgrade, urls[0])
        yield urls[0], urls[1]
    finally:
        for name in names:
            execute(database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_migrating_under_load_delays_no_turn_beyond_the_bound(
    two_databases: tuple[str, str],
) -> None:
    url, empty = two_databases
    seeded, results = off_loop(asyncio.run, run_all(
        url, empty, turns=20_000, per_session=100, sessions=10, rate=5.0, old=False))
    assert seeded > 0
    by_name = {r.scenario: r for r in results}
    assert set(by_name) == {"0013 -> head", "0018 -> head", "empty -> head"}
    for name in ("0013 -> head", "0018 -> head"):
        result = by_name[name]
        assert result.turns_during >= 10, result  # turns were really taken meanwhile
        assert result.errors == 0, result
        assert result.max_delay_ms < BOUND_S * 1000, result
    assert off_loop(migrate.current, url) == migrate.head()
    assert off_loop(migrate.current, empty) == migrate.head()
