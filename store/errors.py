"""Errors raised by the store.

The tree::

    StoreError                  anything the store refuses or cannot do
    ├── VersionConflict         the session moved on since it was loaded; nothing was written
    ├── AlreadyApplied          the source record is already in the turn log; nothing was written
    ├── DuplicateInput          the conversation already had an input with this id; nothing was
    │                           written
    └── EmbeddedServerError     the embedded PostgreSQL could not be started

Context travels as keyword-only attributes so callers (metrics, logs, retries) never parse
messages.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every error the store raises on purpose."""


class VersionConflict(StoreError):
    """Another writer saved the session first: reload and rerun the turn."""

    def __init__(self, *, session_id: str, expected: int, found: int | None) -> None:
        self.session_id = session_id
        self.expected = expected
        self.found = found
        super().__init__(
            f"session {session_id!r}: expected version {expected}, found {found}"
        )


class AlreadyApplied(StoreError):
    """The record at this topic/partition/offset was applied before: skip it."""

    def __init__(self, *, topic: str, partition: int, offset: int) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(f"{topic}[{partition}]@{offset} is already in the turn log")


class DuplicateInput(StoreError):
    """The conversation already has a turn for this input id (the same message, event or start
    re-produced at another offset): skip it like a replay. The id is left out of the message:
    it came from outside."""

    def __init__(self, *, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id!r}: this input id is already in the turn log")


class EmbeddedServerError(StoreError):
    """The embedded PostgreSQL did not start; the reason is in the message."""


class RegistryError(ValueError):
    """A registry request that cannot be done: the message says why."""


class RegistryInputError(RegistryError):
    """An id or a document the registry cannot store exactly as given (a NUL, a lone
    surrogate): refused, never stored changed."""
