"""Parsing one ``inbound.turns`` record into a turn input, or a DLQ reason.

``parse_record`` never raises: every record becomes either a ``ParsedInput`` (the turn request
minus ``session`` and ``history``, which the pipeline adds after loading) or a ``Rejected`` with a
reason code (the DLQ ``error`` header) and a short detail (the ``detail`` header). The detail names
what was wrong, never the content: a malformed record may hold anything, including personal data.

Checks, in this order: size (before decoding, so an oversized record is never loaded), UTF-8,
JSON (``NaN``, ``Infinity`` and numbers that overflow to infinity are not JSON and are refused
here), a JSON object, nesting at most ``MAX_DEPTH`` levels, text the service can store
(``invalid-text``: no string anywhere in the record, keys of objects included, may hold U+0000
or a lone surrogate such as an escaped ``\\ud800``: PostgreSQL cannot store the first and UTF-8
cannot encode the second, so such a record would fail the same way on every attempt),
``session_id`` (a non-empty string of sane length), a record key equal to the session id
(partitioning by session is what keeps one writer per conversation), ``agent_id`` when given (a
non-empty string of sane length, passed on as is), exactly one input kind, and
the types of the fields that kind uses, including a message's ``at`` (an ISO 8601 time that
stays in range once moved to UTC) and its ``id`` (not empty, and not starting with ``event:`` or
``start:``, the prefixes of the ids events and starts are recorded under). The engine validates
the rest; what it refuses is a fatal ``TurnRequestError`` handled by ``decisions``.
"""

from __future__ import annotations

import re
from typing import Any

from engine import strict_json
from engine.clock import to_utc
from engine.request import check_message_id

__all__ = [
    "INPUT_KINDS",
    "InputKind",
    "ParsedInput",
    "RejectReason",
    "Rejected",
    "parse_record",
]

from consumer.inputs import (
    INPUT_KINDS,
    MAX_SESSION_ID_CHARS,
    InputKind,
    ParsedInput,
    Rejected,
    RejectReason,
)

MAX_AGENT_ID_CHARS = 256  # as long as the registry's ids (engine.definition)

MAX_DEPTH = 64
"""The most objects and lists a record may nest. A start's ``input``, an event's ``payload`` and
``context`` are kept in the session and the turn log, and the store's JSON decoder stops at a
nesting of about 200: a deeper record would be saved and then fail every later load of its
conversation. Sixty-four levels is far more than any adapter's payload needs."""

# Fields a record may carry beyond the kind itself; anything else is dropped, not forwarded, so
# a producer cannot smuggle ``session`` or ``history`` past the store.
_SHARED_FIELDS = ("context", "silenced")
_KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "message": ("id", "at", "images"),
    "wake": (),
    "event": ("payload", "key", "direction"),
    "start": (),
}
# Names a refusal's detail may show; any other name is data.
_KNOWN_NAMES = frozenset(
    {
        "session_id",
        *INPUT_KINDS,
        *_SHARED_FIELDS,
        *(n for f in _KIND_FIELDS.values() for n in f),
        "flow",
        "input",
        "reason",
        "understand",
        "agent_id",
    }
)


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
        body = strict_json.loads(text)
    except strict_json.NotJsonNumber as exc:
        return Rejected("not-json", str(exc))
    except (ValueError, RecursionError) as exc:
        position = getattr(exc, "pos", None)
        where = f" at char {position}" if position is not None else ""
        return Rejected("not-json", f"value is not JSON{where}")
    if not isinstance(body, dict):
        return Rejected("not-an-object", f"JSON value is a {type(body).__name__}, not an object")
    # Each level of nesting opens a bracket, so a record with few brackets needs no walk.
    if (
        text.count("{") + text.count("[") > MAX_DEPTH
        and strict_json.depth(body, MAX_DEPTH) > MAX_DEPTH
    ):
        return Rejected("too-deep", f"objects and lists nested deeper than {MAX_DEPTH} levels")
    problem = _unstorable_text(body) if _RISKY_ESCAPE.search(text) else None
    if problem is not None:
        return Rejected("invalid-text", problem)

    session_id = body.get("session_id")
    if not isinstance(session_id, str) or not session_id.strip():
        return Rejected("missing-session-id", "session_id is missing or not a non-empty string")
    if len(session_id) > MAX_SESSION_ID_CHARS:
        return Rejected("missing-session-id", f"session_id longer than {MAX_SESSION_ID_CHARS}")
    if key is None:
        return Rejected("key-mismatch", "record has no key; key it by session_id")
    if key != session_id.encode("utf-8"):
        return Rejected("key-mismatch", "record key is not the session_id")

    agent_id = body.get("agent_id")
    if agent_id is not None and (
        not isinstance(agent_id, str) or not agent_id or len(agent_id) > MAX_AGENT_ID_CHARS
    ):
        return Rejected(
            "invalid-field",
            f"agent_id must be a non-empty string of at most {MAX_AGENT_ID_CHARS} characters",
        )

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
        agent_id=agent_id,
    )


def _check_fields(kind: str, body: dict[str, Any]) -> str | None:
    """The first type problem of the fields this kind uses, or None."""
    value = body[kind]
    if kind == "message":
        if not isinstance(value, str):
            return "message must be a string"
        if body.get("id") is not None:
            problem = _message_id_problem(body["id"])
            if problem is not None:
                return problem
        if body.get("at") is not None and not _is_time(body["at"]):
            return "at must be an ISO 8601 time within years 1-9999 in UTC"
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


def _message_id_problem(value: Any) -> str | None:
    """Why a message's ``id`` cannot be used, or None (the engine's own rule, checked here so
    the record is refused with a reason before any turn)."""
    if not isinstance(value, str):
        return "id must be a string"
    try:
        check_message_id(value)
    except ValueError as exc:
        return str(exc)
    return None


# A decoded string can hold NUL or a lone surrogate only through a JSON escape: strict UTF-8
# refuses encoded surrogates and the decoder refuses raw control characters. So the walk over
# every string runs only when the text has such an escape (or text that looks like one).
_RISKY_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")


def _text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored, or None: NUL or a lone surrogate (no value quoted)."""
    if "\x00" in text:
        return "holds U+0000 (NUL)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone surrogate (not encodable as UTF-8)"
    return None


def _unstorable_text(body: dict[str, Any]) -> str | None:
    """The first string of the record (object keys included) that cannot be stored, named by
    its path of field names (never its value), or None. Iterative: the JSON decoder already
    bounds the depth, and this walk adds no recursion of its own."""
    stack: list[tuple[str, Any]] = [("", body)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            problem = _text_problem(value)
            if problem is not None:
                return f"{path or 'value'} {problem}"
        elif isinstance(value, dict):
            for name, item in value.items():
                problem = _text_problem(name)
                if problem is not None:
                    return f"a field name under {path or 'the record'} {problem}"
                stack.append((_join(path, name), item))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(value))
    return None


def _join(path: str, name: str) -> str:
    """``path.name``; a name the record format does not define shows as ``<field>``, since
    names under ``context`` or ``payload`` are the producer's text too."""
    shown = name if name in _KNOWN_NAMES else "<field>"
    return f"{path}.{shown}" if path else shown


def _is_time(value: Any) -> bool:
    """An ISO 8601 string the engine reads as a time that stays in range in UTC."""
    if not isinstance(value, str):
        return False
    try:
        to_utc(value)
    except (ValueError, OverflowError):
        return False
    return True


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
