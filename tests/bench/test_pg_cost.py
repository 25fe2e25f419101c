"""The PostgreSQL cost benchmark names each per-turn statement of the store by what it does, so
its counts follow the code they measure."""

from __future__ import annotations

from bench.pg_cost import _kind
from store import history, outbox, saving
from store.model_budget import _TAKE


def test_each_per_turn_statement_is_named() -> None:
    assert _kind(history.LOAD.sql) == "load"
    assert _kind(saving.SAVE_MANY.sql).startswith("save")
    assert _kind(outbox.MARK_PUBLISHED_DIRECT.sql) == "mark published"
    assert _kind(_TAKE.text) == "per-minute budget take"
    assert _kind("SELECT   1 +\n 1") == "SELECT 1 + 1"  # anything else: its first words
