"""What a refused record says about its customer: read as far as it can be, bounded, escaped,
never an exception."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.turns.refused_words import MAX_NAME, MAX_WORDS, read_refused


def _clean(value: str | None, limit: int) -> None:
    """A kept field is bounded, storable and prints no control character."""
    if value is None:
        return
    assert len(value) <= limit + 1  # the ellipsis that marks a cut
    assert "\x00" not in value
    value.encode("utf-8")  # no lone surrogate
    assert not any(ord(c) < 32 and c not in "\n\t" for c in value)
    assert not any(0x7F <= ord(c) < 0xA0 for c in value)


def _all_clean(key: bytes | None, value: bytes | None) -> None:
    words = read_refused(key, value)
    _clean(words.message, MAX_WORDS)
    for name in (words.input_id, words.key):
        _clean(name, MAX_NAME)
    # the session id is kept as the conversation's own id (pages escape it when shown): it
    # need only be one the store can hold, as the parser asks of it
    if words.session_id is not None:
        assert 0 < len(words.session_id) <= MAX_NAME and "\x00" not in words.session_id
        words.session_id.encode("utf-8")


@settings(max_examples=300)
@given(st.one_of(st.none(), st.binary(max_size=600)),
       st.one_of(st.none(), st.binary(max_size=3000)))
def test_arbitrary_bytes_give_bounded_escaped_fields(
    key: bytes | None, value: bytes | None
) -> None:
    """Any key and value bytes yield a result whose every field is bounded and escaped."""
    _all_clean(key, value)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=300),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                  max_size=4),
    max_leaves=20,
)


@settings(max_examples=300)
@given(st.dictionaries(
    st.sampled_from(["session_id", "message", "id", "at", "wake", "event", "key", "start"]),
    _json_values, max_size=6,
), st.text(max_size=3000))
def test_arbitrary_json_objects_give_bounded_escaped_fields(body: dict, message: str) -> None:
    """A JSON object with any values under the record's names (and any message text, control
    characters and surrogates included) yields bounded, escaped fields."""
    body = {**body, "message": message}
    raw = json.dumps(body).encode()
    _all_clean(body.get("session_id", "").encode("utf-8", "surrogatepass")
               if isinstance(body.get("session_id"), str) else None, raw)


def test_a_record_with_a_bad_time_keeps_its_session_words_and_id() -> None:
    """A message with a usable session id but an ``at`` that is no time keeps all three."""
    raw = json.dumps({"session_id": "cust-1", "message": "I never got an answer\x1b[2J",
                      "id": "m-7", "at": "yesterday"}).encode()
    words = read_refused(b"cust-1", raw)
    assert words.session_id == "cust-1"
    assert words.message == "I never got an answer\\x1b[2J"
    assert words.input_id == "m-7" and words.key == "cust-1"


def test_unusable_session_ids_name_no_conversation() -> None:
    """A session id that is empty, too long, not a string or holds NUL names nothing."""
    for value in ("", "   ", "x" * (MAX_NAME + 1), 42, "a\x00b", None):
        raw = json.dumps({"session_id": value, "message": "hi"}).encode()
        assert read_refused(None, raw).session_id is None


def test_a_value_that_is_not_json_keeps_the_start_of_its_text() -> None:
    """Undecodable or non-JSON values keep their text (cut, with replacement characters)."""
    words = read_refused(b"k", b"\xff not json " + b"a" * 5000)
    assert words.session_id is None and words.key == "k"
    assert words.message is not None and words.message.startswith("\ufffd not json")
    assert len(words.message) == MAX_WORDS + 1 and words.message.endswith("…")
