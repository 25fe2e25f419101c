"""``set_state``: the facts the model may remember for the rest of the conversation.

Code checks every limit before anything is saved; over a limit the tool answers the model
with an error and the state is left exactly as it was, so the model can answer differently.
The limits: 30 keys; a key is 1-64 characters of ``A-Z a-z 0-9 _ . -`` starting with a letter
or digit; a value is at most 500 characters; all keys and values together at most 8 KB
(UTF-8 bytes); the engine's own names are reserved, whatever their case.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MAX_KEYS = 30
MAX_KEY_CHARS = 64
MAX_VALUE_CHARS = 500
MAX_TOTAL_BYTES = 8 * 1024
RESERVED_KEYS = frozenset(
    {
        "agent_goal",
        "agent_state",
        "agent_task",
        "agent_task_result",
        "agent_handoff",
        "agent_consecutive_fallbacks",
    }
)
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")


@dataclass(frozen=True)
class StateUpdate:
    """The outcome of one ``set_state`` call: the new state, or an error and no change."""

    state: dict[str, str]
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def state_size(state: dict[str, str]) -> int:
    """The bytes the state takes, keys and values together (UTF-8)."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in state.items())


def key_problem(key: Any) -> str | None:
    """Why ``key`` cannot be a state key, or None."""
    if not isinstance(key, str) or not key:
        return "key must be a non-empty string"
    if len(key) > MAX_KEY_CHARS:
        return f"key is longer than {MAX_KEY_CHARS} characters"
    if not _KEY.fullmatch(key):
        return "key may use only A-Z a-z 0-9 _ . - and must start with a letter or digit"
    if key.lower() in RESERVED_KEYS:
        return f"key {key!r} is reserved"
    return None


def set_state(current: dict[str, str], key: Any, value: Any) -> StateUpdate:
    """Remember ``key = value`` when every limit holds; otherwise return an error."""
    problem = key_problem(key)
    if problem is not None:
        return StateUpdate(dict(current), problem)
    if value is None:
        return StateUpdate(dict(current), "value is required")
    text = value if isinstance(value, str) else str(value)
    if len(text) > MAX_VALUE_CHARS:
        return StateUpdate(dict(current), f"value is longer than {MAX_VALUE_CHARS} characters")
    updated = {**current, key: text}
    if len(updated) > MAX_KEYS:
        return StateUpdate(dict(current), f"state is full ({MAX_KEYS} keys)")
    if state_size(updated) > MAX_TOTAL_BYTES:
        return StateUpdate(dict(current), "state is full (8 KB)")
    return StateUpdate(updated)
