"""The vocabulary of an ``inbound.turns`` record, shared by every service that reads or writes one.

The consume service's parser (``consumer.turns.parser``) checks records against it; the metrics
label their dead letters by its reasons; the dev chat and the inspector's console bound the
session ids they make by it. Kept apart from the parser so those shared parts need not import
the consume service.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["INPUT_KINDS", "MAX_SESSION_ID_CHARS", "InputKind", "RejectReason"]

InputKind = Literal["message", "wake", "event", "start"]
INPUT_KINDS: tuple[InputKind, ...] = ("message", "wake", "event", "start")

RejectReason = Literal[
    "too-large",
    "empty",
    "not-utf8",
    "not-json",
    "not-an-object",
    "invalid-text",
    "missing-session-id",
    "key-mismatch",
    "unknown-kind",
    "invalid-field",
    "too-deep",
]

MAX_SESSION_ID_CHARS = 256
