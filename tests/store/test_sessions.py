"""Loading and saving sessions; history derived from the turn log."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from uuid import UUID

from store import SaveRequest, Store, TurnRecord
from tests.store.builders import save_request


async def test_unknown_session_loads_as_new(store: Store) -> None:
    """A session never saved loads with no state, version 0 and no history."""
    loaded = await store.load("nobody")
    assert (loaded.state, loaded.version, loaded.history) == (None, 0, [])


async def test_state_round_trips_every_json_type(store: Store) -> None:
    """Every JSON type, nesting and non-ASCII text come back exactly as saved."""
    state = {
        "string": "olá, 世界 🙂 \"quoted\" \\ back",
        "empty": "",
        "int": 42,
        "negative": -7,
        "big": 2**62,
        "float": 3.25,
        "true": True,
        "false": False,
        "null": None,
        "list": [1, "two", None, [3.5], {"four": 4}],
        "object": {"nested": {"deeper": {"k": ["v"]}}, "": "empty key"},
        "empty_list": [],
        "empty_object": {},
    }
    await store.save_turn(save_request("s1", 0, state=state))
    loaded = await store.load("s1")
    assert loaded.state == state
    assert loaded.version == 1


async def test_python_values_are_stored_in_their_json_form(store: Store) -> None:
    """Datetimes, dates, UUIDs and Decimals are written as ISO / exact strings (UTC as "Z",
    the form the engine's own JSON dumps use)."""
    at = datetime(2026, 11, 30, 6, 0, 1, 123456, tzinfo=UTC)
    state = {
        "last_user_at": at,
        "day": date(2026, 11, 30),
        "id": UUID("12345678-1234-5678-1234-567812345678"),
        "price": Decimal("19.90"),
        "pair": (1, 2),
    }
    await store.save_turn(save_request("s1", 0, state=state))
    loaded = await store.load("s1")
    assert loaded.state == {
        "last_user_at": "2026-11-30T06:00:01.123456Z",
        "day": "2026-11-30",
        "id": "12345678-1234-5678-1234-567812345678",
        "price": "19.90",
        "pair": [1, 2],
    }


async def test_each_save_advances_the_version_by_one(store: Store) -> None:
    """Saving at version n stores version n + 1 and the newest state."""
    for expected in range(3):
        saved = await store.save_turn(
            save_request("s1", expected, state={"step": expected})
        )
        assert saved.version == expected + 1
    loaded = await store.load("s1")
    assert (loaded.version, loaded.state) == (3, {"step": 2})


async def test_history_has_user_then_assistant_entries_oldest_first(store: Store) -> None:
    """A message input gives a user entry and each sent message an assistant entry, in order."""
    replies = ["olá!", "como posso ajudar?"]
    await store.save_turn(save_request("s1", 0, message="oi", replies=replies))
    await store.save_turn(save_request("s1", 1, message="quero pagar", replies=["claro"]))
    history = (await store.load("s1")).history
    assert [(h["role"], h["text"]) for h in history] == [
        ("user", "oi"),
        ("assistant", "olá!"),
        ("assistant", "como posso ajudar?"),
        ("user", "quero pagar"),
        ("assistant", "claro"),
    ]
    assert all(isinstance(h["at"], datetime) and h["at"].tzinfo is not None for h in history)


async def test_history_keeps_only_the_last_entries(store: Store) -> None:
    """`history_limit` keeps the newest N entries, still oldest first."""
    for version in range(5):
        await store.save_turn(
            save_request("s1", version, message=f"u{version}", replies=[f"a{version}"])
        )
    history = (await store.load("s1", history_limit=3)).history
    assert [h["text"] for h in history] == ["a3", "u4", "a4"]


async def test_history_skips_turns_without_entries(store: Store) -> None:
    """Wakes that sent nothing add no entries and do not push real entries out of the window."""
    await store.save_turn(save_request("s1", 0, message="oi", replies=["olá"]))
    for version in range(1, 6):
        await store.save_turn(save_request("s1", version, message=None, replies=[]))
    await store.save_turn(save_request("s1", 6, message=None, replies=["lembrete"]))
    history = (await store.load("s1", history_limit=3)).history
    assert [(h["role"], h["text"]) for h in history] == [
        ("user", "oi"),
        ("assistant", "olá"),
        ("assistant", "lembrete"),
    ]


async def test_history_user_entry_takes_the_input_time(store: Store) -> None:
    """The user entry's `at` is the input's own `at`; assistant entries take the turn's time."""
    turn_at = datetime(2026, 11, 30, 6, 30, tzinfo=UTC)
    request = SaveRequest(
        session_id="s1",
        expected_version=0,
        state={},
        turn=TurnRecord(
            input={"session_id": "s1", "message": "oi", "at": "2026-11-30T06:29:58Z"},
            messages=[{"kind": "ai", "text": "olá"}],
            created_at=turn_at,
        ),
    )
    await store.save_turn(request)
    user, assistant = (await store.load("s1")).history
    assert user["at"] == datetime(2026, 11, 30, 6, 29, 58, tzinfo=UTC)
    assert assistant["at"] == turn_at


async def test_sessions_do_not_share_history(store: Store) -> None:
    """One session's turns never appear in another's history."""
    await store.save_turn(save_request("s1", 0, message="from s1", replies=["to s1"]))
    await store.save_turn(save_request("s2", 0, message="from s2", replies=["to s2"]))
    assert [h["text"] for h in (await store.load("s2")).history] == ["from s2", "to s2"]


async def test_nul_characters_are_saved_as_replacement_characters(store: Store) -> None:
    """jsonb cannot hold U+0000: NULs become U+FFFD, while the text "\\u0000" stays verbatim."""
    state = {"nul": "a\x00b", "literal": "a\\u0000b", "key\x00": ["\x00"]}
    await store.save_turn(save_request("s1", 0, state=state, message="oi\x00"))
    loaded = await store.load("s1")
    assert loaded.state == {"nul": "a\ufffdb", "literal": "a\\u0000b", "key\ufffd": ["\ufffd"]}
    assert loaded.history[0]["text"] == "oi\ufffd"
