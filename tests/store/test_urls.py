"""Turning operator URLs into driver URLs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.urls import async_url, hosts, plain_url


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


def test_several_hosts_reach_the_dialect_as_host_parameters() -> None:
    """A libpq multi-host URL becomes the asyncpg dialect's repeated `host=` form, which it
    connects with as a host list (tried in order, `target_session_attrs` choosing)."""
    from sqlalchemy.dialects.postgresql.asyncpg import dialect

    given = ("postgresql://u@10.0.0.1:5432,10.0.0.2:5433/db"
             "?target_session_attrs=read-write&sslmode=require")
    url = async_url(given)
    assert url.query["host"] == ("10.0.0.1:5432", "10.0.0.2:5433")
    _, options = dialect().create_connect_args(url)
    assert options["host"] == ["10.0.0.1", "10.0.0.2"]
    assert options["port"] == [5432, 5433]
    assert options["target_session_attrs"] == "read-write"
    assert options["ssl"] == "require"
    assert hosts(given) == ["10.0.0.1:5432", "10.0.0.2:5433"]


def test_plain_url_gives_the_host_list_back_in_libpq_form() -> None:
    """Round trip: asyncpg's `connect`, psql and pgbench read the comma-separated list."""
    given = "postgresql://u:p%40ss@a:1,b:2/db?target_session_attrs=read-write"
    assert plain_url(given) == given
    assert plain_url(async_url(given)) == given
    assert plain_url("postgresql://u@a,b/db") == "postgresql://u@a,b/db"


def test_an_empty_host_in_the_list_is_refused() -> None:
    with pytest.raises(ValueError, match="empty host"):
        async_url("postgresql://u@a:1,,b:2/db")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80) | st.builds(
    lambda hosts, rest: f"postgresql://u@{','.join(hosts)}/{rest}",
    st.lists(st.text(alphabet="ab:1,[]@/?&=%", max_size=6), max_size=4),
    st.text(alphabet="db?&=%x,:@", max_size=12),
))
def test_any_database_url_is_accepted_or_refused_with_a_reason(given: str) -> None:
    """Whatever an operator writes, the conversion gives a URL or a one-line ValueError."""
    try:
        converted = async_url(given)
    except ValueError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert converted.drivername == "postgresql+asyncpg"
