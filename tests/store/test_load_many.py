"""Many sessions loaded in one statement: each row is exactly what loading it alone gives."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from store import LoadRequest, SourceRecord, Store, direct
from tests.store.builders import save_request


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    sent: list[str] = []
    monkeypatch.setattr(direct, "statement_listeners", [sent.append])
    yield sent


async def test_thirty_sessions_each_get_their_own(store: Store, statements: list[str]) -> None:
    """Sessions with different histories, one new, replays and duplicate ids among them."""
    for n in range(30):
        for turn in range(n % 4):
            await store.save_turn(save_request(
                f"s{n}", turn, replies=[f"r{n}.{turn}"], outbox=turn % 2,
                source=SourceRecord("in", n % 3, 1000 * n + turn), input_id=f"m{n}.{turn}",
            ))
    asks = [
        LoadRequest(
            f"s{n}",
            sources=(SourceRecord("in", n % 3, 1000 * n + (n % 5)),
                     SourceRecord("in", n % 3, 1000 * n + 900)),
            input_ids=(f"m{n}.{n % 5}", f"m{n}.new"),
        )
        for n in range(30)
    ] + [LoadRequest("never-seen", sources=(SourceRecord("in", 0, 1),), input_ids=("x",))]
    statements.clear()
    together = await store.load_many(asks, history_limit=6)
    assert len(statements) == 1
    alone = [
        await store.load(a.session_id, history_limit=6, sources=a.sources, input_ids=a.input_ids)
        for a in asks
    ]
    assert together == alone
    for n, loaded in enumerate(together[:30]):
        assert loaded.version == n % 4
        assert [e["text"] for e in loaded.history if e["role"] == "assistant"] == [
            f"r{n}.{t}" for t in range(n % 4)
        ]
        replayed = n % 5 < n % 4
        assert (SourceRecord("in", n % 3, 1000 * n + n % 5) in loaded.applied_sources) == replayed
        assert (f"m{n}.{n % 5}" in loaded.duplicate_ids) == replayed
        assert not loaded.applied and not loaded.duplicate  # the second of each is new
    assert together[30].state is None and together[30].version == 0


async def test_nothing_asked_is_no_statement(store: Store, statements: list[str]) -> None:
    assert await store.load_many([]) == []
    assert statements == []
