"""The direct path of the per-turn statements: same SQL, same errors, a broken connection out.

``store/direct.py`` runs the load, save and mark on the pooled asyncpg connection. These tests
pin what callers rely on: the ``$n`` rewrite keeps casts and repeats, errors arrive as
SQLAlchemy raised them (so the consumer's decisions read them unchanged), and a connection that
broke under a statement is invalidated, so the next statement gets a live one.
"""

from __future__ import annotations

import asyncpg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import exc as sa_exc

from consumer.failures import cannot_succeed
from consumer.turns.decisions import Retry, RetryPolicy, decide
from store import AlreadyApplied, SourceRecord, Store, direct
from store.urls import plain_url
from tests.store.builders import save_request


def test_parameters_are_numbered_in_order_of_first_use() -> None:
    statement = direct.positional(
        "SELECT :b, CAST(:a AS jsonb), '[]'::jsonb, x::text, :b WHERE y = :a_2"
    )
    assert statement.sql == "SELECT $1, CAST($2 AS jsonb), '[]'::jsonb, x::text, $1 WHERE y = $3"
    assert statement.names == ("b", "a", "a_2")
    assert statement.arguments({"a": 1, "b": 2, "a_2": 3, "unused": 4}) == [2, 1, 3]


def test_a_missing_parameter_is_named() -> None:
    with pytest.raises(KeyError, match="session_id"):
        direct.positional("SELECT :session_id").arguments({})


@given(st.text())
def test_any_text_rewrites_without_raising(sql: str) -> None:
    """Whatever the text, the rewrite returns a statement whose names it can bind."""
    statement = direct.positional(sql)
    assert len(set(statement.names)) == len(statement.names)
    assert statement.arguments({name: None for name in statement.names}) == [None] * len(
        statement.names
    )


async def test_a_constraint_is_an_integrity_error(store: Store) -> None:
    """The save's unique index, hit through the direct path, still reads as a replay."""
    source = SourceRecord("inbound.turns", 0, 5)
    await store.save_turn(save_request("s1", 0, source=source))
    with pytest.raises(AlreadyApplied):
        await store.save_turn(save_request("s2", 0, source=source))


async def test_text_the_database_cannot_store_is_refused_not_retried(store: Store) -> None:
    """A NUL in a text column (here the session id; the consumer's parser refuses such ids,
    a host calling the store may not) is the data's fault: no retry fixes it, and the
    connection stays in the pool."""
    request = save_request("s\x001", 0)
    with pytest.raises(sa_exc.DBAPIError) as raised:
        await store.save_turn(request)
    assert not raised.value.connection_invalidated
    assert isinstance(raised.value.orig, asyncpg.PostgresError)
    assert cannot_succeed(raised.value) == "unstorable-text"
    assert (await store.load("s1")).version == 0


async def test_a_lone_surrogate_in_json_is_saved_as_the_replacement_character(
    store: Store,
) -> None:
    """A lone surrogate in the state or a reply (a model's reply can hold an escaped
    ``\\ud800``) cannot be encoded as UTF-8: it is written as U+FFFD, like a NUL, so the turn
    is saved instead of its input going to the DLQ for what the model wrote."""
    request = save_request("s1", 0, replies=["hi \udc00"])
    request.state["data"] = {"name": "a\udc00b"}
    await store.save_turn(request)
    loaded = await store.load("s1")
    assert loaded.version == 1 and loaded.state is not None
    assert loaded.state["data"] == {"name": "a\ufffdb"}
    assert [e["text"] for e in loaded.history if e["role"] == "assistant"] == ["hi \ufffd"]


async def test_a_connection_killed_under_a_statement_is_invalidated(
    store: Store, database_url: str
) -> None:
    """pg_terminate_backend from outside: the next statement on a killed pooled connection
    fails as a lost connection (retried as infrastructure), and a later one runs on a new
    connection."""
    await store.save_turn(save_request("s1", 0))
    await store.load("s1")
    killer = await asyncpg.connect(plain_url(database_url))
    try:
        killed = await killer.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND application_name = 'turnflow'"
        )
    finally:
        await killer.close()
    assert killed >= 1
    failures = 0
    for _ in range(killed + 1):  # at most one failure per killed connection
        try:
            loaded = await store.load("s1")
        except sa_exc.DBAPIError as error:
            failures += 1
            assert error.connection_invalidated
            decision = decide(error, attempt=1, policy=RetryPolicy())
            assert isinstance(decision, Retry) and decision.reason == "infrastructure"
            continue
        assert loaded.version == 1
        break
    else:
        pytest.fail("the store never got a live connection back")
    assert failures >= 1
