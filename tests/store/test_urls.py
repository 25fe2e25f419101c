"""Turning operator URLs into driver URLs."""

from __future__ import annotations

import pytest

from store.urls import async_url, plain_url


@pytest.mark.parametrize(
    "given",
    ["postgresql://u@h:5433/db", "postgres://u@h:5433/db", "postgresql+asyncpg://u@h:5433/db"],
)
def test_plain_urls_get_the_asyncpg_driver(given: str) -> None:
    """Any PostgreSQL spelling becomes postgresql+asyncpg with host, port and database kept."""
    url = async_url(given)
    assert (url.drivername, url.username, url.host, url.port, url.database) == (
        "postgresql+asyncpg", "u", "h", 5433, "db",
    )


def test_sslmode_becomes_asyncpg_ssl() -> None:
    """libpq's `sslmode=require` is passed to asyncpg as `ssl=require`."""
    url = async_url("postgresql://u@h/db?sslmode=require")
    assert dict(url.query) == {"ssl": "require"}


def test_non_postgres_urls_are_refused() -> None:
    """A MySQL URL is a configuration error, reported by scheme."""
    with pytest.raises(ValueError, match="mysql"):
        async_url("mysql://u@h/db")


def test_plain_url_keeps_the_password() -> None:
    """`plain_url` gives a libpq URL usable by psql and pgbench, password included."""
    assert plain_url("postgresql+asyncpg://u:secret@h:1/db") == "postgresql://u:secret@h:1/db"
