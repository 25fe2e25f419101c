"""The vocabulary of an ``inbound.turns`` record, shared by every service that reads or writes one.

The consume service's parser (``consumer.turns.parser``) checks records against it and gives a
``ParsedInput`` or a ``Rejected``; hosting routes a ``ParsedInput`` to its agent; the metrics
label their dead letters by its reasons; the dev chat and the inspector's console bound the
session ids they make by it. Kept apart from the parser so those shared parts need not import
the consume service.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "INPUT_KINDS",
    "MAX_SESSION_ID_CHARS",
    "InputKind",
    "ParsedInput",
    "RejectReason",
    "Rejected",
]

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


@dataclass(frozen=True)
class ParsedInput:
    """A valid input: which session, which kind, the request fields, and an id for logs/dedup."""

    session_id: str
    kind: InputKind
    request: dict[str, Any] = field(repr=False)
    input_id: str
    # The agent the record is for (a registry deployment routes by it); None: the agent its
    # conversation is bound to, or the deployment's one agent.
    agent_id: str | None = None


@dataclass(frozen=True)
class Rejected:
    """A record that goes to the DLQ: ``reason`` is a code, ``detail`` a content-free sentence."""

    reason: RejectReason
    detail: str
