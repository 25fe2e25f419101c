"""The record parser: every record becomes a turn input or a DLQ reason, never an exception."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer.turns.parser import ParsedInput, Rejected, parse_record

LIMIT = 4096


def parse(value: object, key: bytes | None = b"s1", **kw: object) -> ParsedInput | Rejected:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return parse_record(key, raw, max_bytes=kw.pop("max_bytes", LIMIT), source="t:0:7", **kw)


def test_message_becomes_a_request_without_session_or_history() -> None:
    """A message record keeps its fields and drops anything that could smuggle state."""
    parsed = parse(
        {"session_id": "s1", "message": "oi", "id": "wamid.1", "at": "2026-01-05T09:00:00Z",
         "session": {"version": 99}, "history": [{"role": "user", "text": "x"}],
         "context": {"channel": "wa"}}
    )
    assert isinstance(parsed, ParsedInput)
    assert parsed.kind == "message"
    assert parsed.input_id == "wamid.1"
    assert parsed.request == {
        "session_id": "s1", "message": "oi", "id": "wamid.1", "at": "2026-01-05T09:00:00Z",
        "context": {"channel": "wa"},
    }


@pytest.mark.parametrize(
    ("body", "kind", "input_id"),
    [
        ({"session_id": "s1", "wake": "k"}, "wake", "wake:k"),
        ({"session_id": "s1", "event": "paid", "payload": {}, "key": "e1"}, "event", "event:e1"),
        ({"session_id": "s1", "start": {"flow": "f", "key": "k"}}, "start", "start:k"),
        ({"session_id": "s1", "message": "no id"}, "message", "t:0:7"),
    ],
)
def test_each_input_kind_is_recognised(body: dict[str, object], kind: str, input_id: str) -> None:
    """Wake, event and start records parse to their kind; inputs without an id use the source."""
    parsed = parse(body)
    assert isinstance(parsed, ParsedInput)
    assert (parsed.kind, parsed.input_id) == (kind, input_id)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "empty"),
        (b"\xff\xfe", "not-utf8"),
        (b"{not json", "not-json"),
        (b"[1, 2]", "not-an-object"),
        (b'{"message": "oi"}', "missing-session-id"),
        (b'{"session_id": "", "message": "oi"}', "missing-session-id"),
        (b'{"session_id": 5, "message": "oi"}', "missing-session-id"),
        (b'{"session_id": "s1"}', "unknown-kind"),
        (b'{"session_id": "s1", "message": "a", "wake": "k"}', "unknown-kind"),
        (b'{"session_id": "s1", "shout": "a"}', "unknown-kind"),
        (b'{"session_id": "s1", "message": 5}', "invalid-field"),
        (b'{"session_id": "s1", "event": "e", "payload": []}', "invalid-field"),
        (b'{"session_id": "s1", "start": {"key": "k"}}', "invalid-field"),
        (b'{"session_id": "s1", "start": {"flow": "f"}}', "invalid-field"),
        (b'{"session_id": "s1", "event": "paid"}', "invalid-field"),
        (b'{"session_id": "s1", "wake": "k", "context": "x"}', "invalid-field"),
        (b'{"session_id": "s1", "message": "oi", "id": ""}', "invalid-field"),
        (b'{"session_id": "s1", "message": "oi", "id": 7}', "invalid-field"),
        (b'{"session_id": "s1", "message": "oi", "id": "event:pay-77"}', "invalid-field"),
        (b'{"session_id": "s1", "message": "oi", "id": "start:k"}', "invalid-field"),
        (b'{"session_id": "s1", "event": "e", "key": "k", "payload": {"a": '
         + b"[" * 80 + b"]" * 80 + b"}}", "too-deep"),
        (b'{"session_id": "s1", "message": "oi", "context": ' + b'{"a": ' * 64 + b"1"
         + b"}" * 64 + b"}", "too-deep"),
    ],
)
def test_malformed_records_are_rejected_with_a_reason(raw: bytes, reason: str) -> None:
    """Each kind of malformed record maps to its DLQ reason code."""
    parsed = parse(raw)
    assert isinstance(parsed, Rejected)
    assert parsed.reason == reason


def test_oversized_record_is_refused_before_decoding() -> None:
    """A record over the limit is too-large even when it is not valid UTF-8."""
    parsed = parse(b"\xff" * (LIMIT + 1))
    assert isinstance(parsed, Rejected)
    assert parsed.reason == "too-large"


def test_key_must_be_the_session_id() -> None:
    """A record keyed by another session, or not keyed, is refused: partitioning by session is
    what keeps one writer per conversation."""
    body = {"session_id": "s1", "message": "oi"}
    for key in (b"s2", None):
        parsed = parse(body, key=key)
        assert isinstance(parsed, Rejected)
        assert parsed.reason == "key-mismatch"


def test_detail_never_echoes_content() -> None:
    """The DLQ detail of a malformed record does not contain the record's text."""
    parsed = parse(b'{"session_id": "s1", "message": {"secret": "card 4111"}}')
    assert isinstance(parsed, Rejected)
    assert "4111" not in parsed.detail


@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_raise(raw: bytes) -> None:
    """Any byte string yields a ParsedInput or a Rejected."""
    assert isinstance(
        parse_record(None, raw, max_bytes=200, source="x"), ParsedInput | Rejected
    )


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c,
                                                                         max_size=4)))
def test_arbitrary_json_never_raises(value: object) -> None:
    """Any JSON document yields a ParsedInput or a Rejected."""
    raw = json.dumps(value).encode()
    assert isinstance(parse_record(None, raw, max_bytes=10_000), ParsedInput | Rejected)


def test_a_message_carries_its_images_and_a_non_list_is_refused() -> None:
    """images (a list of objects) ride with a message to the engine, which judges each one;
    anything else is an invalid field that names images, not its content."""
    images = [{"media_type": "image/png", "url": "https://cdn.loja.com/a.png"}, {"x": 1}]
    parsed = parse({"session_id": "s1", "message": "foto", "id": "m1", "images": images})
    assert isinstance(parsed, ParsedInput) and parsed.request["images"] == images
    for bad in ("https://a.png", [1, 2], {"url": "x"}):
        refused = parse({"session_id": "s1", "message": "foto", "images": bad})
        assert refused == Rejected("invalid-field", "images must be a list of objects")


def test_a_record_nested_to_the_limit_is_taken() -> None:
    """64 levels of objects and lists, the record itself counted, is still an input."""
    context = b'{"a": ' * 63 + b"1" + b"}" * 63
    parsed = parse(b'{"session_id": "s1", "message": "oi", "context": ' + context + b"}")
    assert isinstance(parsed, ParsedInput), parsed


_ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(st.text(max_size=300) | _ANY_JSON)
def test_property_any_agent_id_is_kept_exactly_or_refused_with_a_reason(agent_id: object) -> None:
    """``agent_id`` of any shape: a non-empty string up to 256 characters passes on exactly as
    written (no trimming, no case folding); anything else is refused as an invalid field."""
    body = {"session_id": "s1", "message": "oi", "agent_id": agent_id}
    try:
        value = json.dumps(body).encode()
    except ValueError:
        return
    parsed = parse_record(b"s1", value, max_bytes=1 << 20)
    if agent_id is None:
        assert isinstance(parsed, ParsedInput) and parsed.agent_id is None
    elif isinstance(agent_id, str) and 0 < len(agent_id) <= 256 and not _unstorable(agent_id):
        assert isinstance(parsed, ParsedInput) and parsed.agent_id == agent_id
        assert "agent_id" not in parsed.request
    else:
        assert isinstance(parsed, Rejected)
        assert parsed.reason in ("invalid-field", "invalid-text")


def _unstorable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return "\x00" in text
