"""A load asked with the version whose history the caller holds, and the entries a save returns.

Together they let a consumer keep a conversation's window: the load leaves the history out only
while the session is at the version asked about, and a save returns exactly the entries a later
load reads for its turn (the window of the next version is the last N of the two).
"""

from __future__ import annotations

from store import LoadRequest, SavedTurn, Store
from tests.store.builders import save_request

LIMIT = 5


async def test_history_is_left_out_only_at_the_version_held(store: Store) -> None:
    """Sessions at versions 0 to 3 asked with the right version, a wrong one and none, in one
    statement: only the right one leaves the history out; a new session never does."""
    for n in range(4):
        for turn in range(n):
            await store.save_turn(save_request(f"s{n}", turn, replies=[f"r{n}.{turn}"]))
    asks = []
    for n in range(4):
        asks += [LoadRequest(f"s{n}", history_version=n),
                 LoadRequest(f"s{n}", history_version=n + 1), LoadRequest(f"s{n}")]
    rows = await store.load_many(asks, history_limit=LIMIT)
    for n in range(4):
        right, wrong, none = rows[3 * n: 3 * n + 3]
        assert right.history_held == (n > 0) and (right.history == [] or n == 0)
        assert not wrong.history_held and not none.history_held
        assert wrong.history == none.history
        assert [e["text"] for e in none.history if e["role"] == "assistant"] == [
            f"r{n}.{t}" for t in range(n)
        ]
        assert right.version == wrong.version == none.version == n


async def test_a_save_returns_the_entries_a_load_then_reads(store: Store) -> None:
    """Alone and in a group, messages, wakes that send nothing and replies: the previous load's
    window followed by what the save returned, trimmed, is the next load's window."""
    before = {sid: (await store.load(sid, history_limit=LIMIT)).history for sid in "abc"}
    for turn in range(6):
        requests = [
            save_request("a", turn, replies=[f"a{turn}"] * (turn % 3)),
            save_request("b", turn, message=None if turn % 2 else f"b{turn}", replies=[]),
            save_request("c", turn, message=f"c{turn}", replies=[f"c{turn}", "again"]),
        ]
        if turn % 2:
            saved = [await store.save_turn(requests[0]), *await store.save_turns(requests[1:])]
        else:
            saved = [await store.save_turn(r) for r in requests]
        for request, result in zip(requests, saved, strict=True):
            assert isinstance(result, SavedTurn) and result.history is not None
            sid = request.session_id
            after = (await store.load(sid, history_limit=LIMIT)).history
            assert (before[sid] + result.history)[-LIMIT:] == after
            before[sid] = after
    assert [e["text"] for e in before["c"]][-2:] == ["c5", "again"]
