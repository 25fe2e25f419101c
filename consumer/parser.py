"""Parsing one ``inbound.turns`` record into a turn input, or a DLQ reason.

``parse_record`` never raises: every record becomes either a ``ParsedInput`` (the turn request
minus ``session`` and ``history``, which the pipeline adds after loading) or a ``Rejected`` with a
reason code (the DLQ ``error`` header) and a short detail (the ``detail`` header). The detail names
what was wrong, never the content: a malformed record may hold anything, including personal data.

Checks, in this order: size (before decoding, so an oversized record is never loaded), UTF-8,
JSON, a JSON object, ``session_id`` (a non-empty string of sane length), a record key equal to
the session id (partitioning by session is what keeps one writer per
conversation), exactly one input kind, and the types of the fields that kind uses. The engine
validates the rest; what it refuses is a fatal ``TurnRequestError`` handled by ``decisions``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "INPUT_KINDS",
    "InputKind",
    "ParsedInput",
    "RejectReason",
    "Rejected",
    "parse_record",
]

InputKind = Literal["message", "wake", "event", "start"]
INPUT_KINDS: tuple[InputKind, ...] = ("message", "wake", "event", "start")

RejectReason = Literal[
    "too-large",
    "empty",
    "not-utf8",
    "not-json",
    "not-an-object",
    "missing-session-id",
    "key-mismatch",
    "unknown-kind",
    "invalid-field",
]

MAX_SESSION_ID_CHARS = 256

# Fields a record may carry beyond the kind itself; anything else is dropped, not forwarded, so
# a producer cannot smuggle ``session`` or ``history`` past the store.
_SHARED_FIELDS = ("context", "silenced")
_KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "message": ("id", "at", "images"),
    "wake": (),
    "event": ("payload", "key", "direction"),
    "start": (),
}


@dataclass(frozen=True)
class ParsedInput:
    """A valid input: which session, which kind, the request fields, and an id for logs/dedup."""

    session_id: str
    kind: InputKind
    request: dict[str, Any] = field(repr=False)
    input_id: str


@dataclass(frozen=True)
class Rejected:
    """A record that goes to the DLQ: ``reason`` is a code, ``detail`` a content-free sentence."""

    reason: RejectReason
    detail: str


def parse_record(
    key: bytes | None,
    value: bytes | None,
    *,
    max_bytes: int,
    source: str = "",
) -> ParsedInput | Rejected:
    """Parse one record's key and value; ``source`` ("topic:partition:offset") names inputs
    that carry no id of their own."""
    if value is None or len(value) == 0:
        return Rejected("empty", "record has no value")
    if len(value) > max_bytes:
        return Rejected("too-large", f"value is {len(value)} bytes, limit {max_bytes}")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Rejected("not-utf8", f"invalid UTF-8 at byte {exc.start}")
    try:
        body = json.loads(text)
    except (ValueError, RecursionError) as exc:
        position = getattr(exc, "pos", None)
        where = f" at char {position}" if position is not None else ""
        return Rejected("not-json", f"value is not JSON{where}")
    if not isinstance(body, dict):
        return Rejected("not-an-object", f"JSON value is a {type(body).__name__}, not an object")

    session_id = body.get("session_id")
    if not isinstance(session_id, str) or not session_id.strip():
        return Rejected("missing-session-id", "session_id is missing or not a non-empty string")
    if len(session_id) > MAX_SESSION_ID_CHARS:
        return Rejected("missing-session-id", f"session_id longer than {MAX_SESSION_ID_CHARS}")
    if key is None:
        return Rejected("key-mismatch", "record has no key; key it by session_id")
    if key != session_id.encode("utf-8"):
        return Rejected("key-mismatch", "record key is not the session_id")

    kinds = [k for k in INPUT_KINDS if body.get(k) is not None]
    if len(kinds) != 1:
        found = ", ".join(kinds) if kinds else "none"
        return Rejected(
            "unknown-kind", f"expected exactly one of message/wake/event/start, got {found}"
        )
    kind = kinds[0]

    problem = _check_fields(kind, body)
    if problem is not None:
        return Rejected("invalid-field", problem)

    request: dict[str, Any] = {"session_id": session_id, kind: body[kind]}
    for name in (*_KIND_FIELDS[kind], *_SHARED_FIELDS):
        if body.get(name) is not None:
            request[name] = body[name]
    return ParsedInput(
        session_id=session_id,
        kind=kind,
        request=request,
        input_id=_input_id(kind, body, source),
    )


def _check_fields(kind: str, body: dict[str, Any]) -> str | None:
    """The first type problem of the fields this kind uses, or None."""
    value = body[kind]
    if kind == "message":
        if not isinstance(value, str):
            return "message must be a string"
        if body.get("id") is not None and not isinstance(body["id"], str):
            return "id must be a string"
        if body.get("at") is not None and not isinstance(body["at"], str):
            return "at must be an ISO 8601 string"
        images = body.get("images")
        if images is not None and (
            not isinstance(images, list) or not all(isinstance(i, dict) for i in images)
        ):
            return "images must be a list of objects"
    elif kind == "wake":
        if not isinstance(value, str) or not value:
            return "wake must be a non-empty string key"
    elif kind == "event":
        if not isinstance(value, str) or not value:
            return "event must be a non-empty string name"
        if not isinstance(body.get("key"), str) or not body["key"]:
            return "event key must be a non-empty string"
        if body.get("payload") is not None and not isinstance(body["payload"], dict):
            return "event payload must be an object"
        if body.get("direction") not in (None, "inbound", "outbound"):
            return "event direction must be inbound or outbound"
    elif kind == "start":
        if not isinstance(value, dict) or not isinstance(value.get("flow"), str):
            return "start must be an object with a string flow"
        if not isinstance(value.get("key"), str) or not value["key"]:
            return "start key must be a non-empty string"
        if value.get("input") is not None and not isinstance(value["input"], dict):
            return "start input must be an object"
    if body.get("context") is not None and not isinstance(body["context"], dict):
        return "context must be an object"
    if body.get("silenced") is not None and not isinstance(body["silenced"], dict):
        return "silenced must be an object or null"
    return None


def _input_id(kind: str, body: dict[str, Any], source: str) -> str:
    """A stable id for logs: the producer's own id when the kind has one, else the source."""
    own: Any = None
    if kind == "message":
        own = body.get("id")
    elif kind == "wake":
        own = f"wake:{body['wake']}"
    elif kind == "event":
        own = f"event:{body['key']}"
    elif kind == "start":
        own = f"start:{body['start']['key']}"
    return str(own) if own else (source or "unknown")
