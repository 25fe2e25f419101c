"""set_state limits: 30 keys, key shape and length, 500-character values, 8 KB, reserved keys."""

from __future__ import annotations

import pytest

from engine.lifecycle.state import (
    MAX_KEYS,
    MAX_TOTAL_BYTES,
    MAX_VALUE_CHARS,
    RESERVED_KEYS,
    set_state,
    state_size,
)


def test_a_valid_key_and_value_are_saved() -> None:
    """A key of letters, digits, '_', '.' and '-' with a short value is remembered."""
    update = set_state({}, "order.id_2-b", "A-123")
    assert update.ok and update.state == {"order.id_2-b": "A-123"}


@pytest.mark.parametrize("key", ["a", "9lives", "x" * 64])
def test_keys_at_the_edges_are_accepted(key: str) -> None:
    """One character, a leading digit and exactly 64 characters are all valid keys."""
    assert set_state({}, key, "v").ok


@pytest.mark.parametrize(
    "key",
    ["", "x" * 65, "_private", ".dot", "-dash", "has space", "acentuação", "a/b", None, 7],
)
def test_bad_keys_are_refused_and_nothing_is_saved(key: object) -> None:
    """An empty, 65-character, badly started or badly spelled key is an error; state unchanged."""
    before = {"kept": "yes"}
    update = set_state(before, key, "v")
    assert not update.ok and update.error
    assert update.state == before


@pytest.mark.parametrize("key", [*sorted(RESERVED_KEYS), "AGENT_GOAL", "Agent_Handoff"])
def test_reserved_keys_are_refused_whatever_their_case(key: str) -> None:
    """The engine's own names are reserved, case-insensitively."""
    update = set_state({}, key, "v")
    assert update.error is not None and "reserved" in update.error
    assert update.state == {}


def test_value_of_500_characters_is_saved_and_501_is_refused() -> None:
    """A value may be 500 characters; one more is an error and nothing is saved."""
    assert set_state({}, "k", "v" * MAX_VALUE_CHARS).ok
    update = set_state({"a": "1"}, "k", "v" * (MAX_VALUE_CHARS + 1))
    assert not update.ok and update.state == {"a": "1"}


def test_thirty_keys_fit_and_the_thirty_first_is_refused() -> None:
    """The 30th key is saved; a 31st new key is 'state is full'; overwriting one still works."""
    state: dict[str, str] = {}
    for i in range(MAX_KEYS):
        update = set_state(state, f"k{i}", "v")
        assert update.ok
        state = update.state
    full = set_state(state, "one_more", "v")
    assert full.error is not None and "full" in full.error and len(full.state) == MAX_KEYS
    assert set_state(state, "k0", "changed").state["k0"] == "changed"


def test_eight_kilobytes_fit_and_one_byte_more_is_refused() -> None:
    """Keys and values together may take exactly 8 KB; one byte over is refused."""
    state: dict[str, str] = {}
    for i in range(16):  # 16 x (3-byte key + 500-byte value) = 8048 bytes
        state = set_state(state, f"k{i:02d}", "v" * 500).state
    assert state_size(state) == 16 * 503
    room = MAX_TOTAL_BYTES - state_size(state)  # 144 bytes
    exact = set_state(state, "zz", "v" * (room - 2))
    assert exact.ok and state_size(exact.state) == MAX_TOTAL_BYTES
    over = set_state(state, "zz", "v" * (room - 1))
    assert over.error == "state is full (8 KB)" and over.state == state


def test_non_string_values_are_stored_as_text_and_none_is_refused() -> None:
    """A number is remembered as its text; a null value is an error."""
    assert set_state({}, "n", 42).state == {"n": "42"}
    assert not set_state({}, "n", None).ok
