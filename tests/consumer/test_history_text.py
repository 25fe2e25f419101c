"""A loaded history validated straight from the database's JSON text (``entries_of_text``).

The consumer asks the load for the history as text and builds the engine's entries from it in
one pass. That must give the engine exactly what decoding the text into dicts
(``store.history.history_entries``) and validating those gave: the same entries where both
accept, the same dicts for the engine to refuse where validation refuses, the same error where
the text is not JSON at all. Anything may sit in a stored history (an input's ``at`` as its
channel wrote it, any text), so the property is held over arbitrary values and text.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from engine import HistoryEntry
from engine.history import entries_of_text
from store import LoadRequest, Store
from store.history import history_entries
from tests.store.builders import save_request

_ENTRIES: TypeAdapter[tuple[HistoryEntry, ...]] = TypeAdapter(tuple[HistoryEntry, ...])


def _decoded_way(text: str) -> Any:
    """What the consumer gave the engine before: the decoder's dicts, validated when they
    validate, else as they are; or the decoder's error."""
    try:
        loaded = history_entries(text)
    except Exception as error:  # not JSON, or JSON that is no list of objects
        return ("error", type(error))
    try:
        return _ENTRIES.validate_python(loaded)
    except ValidationError:
        return loaded


def _text_way(text: str) -> Any:
    try:
        return entries_of_text(text)
    except Exception as error:
        return ("error", type(error))


def _same(a: Any, b: Any) -> bool:
    """Equal, and each ``at`` the same instant with the same offset (``==`` alone would call
    two aware datetimes of one instant in different offsets equal)."""
    if a != b or type(a) is not type(b):
        return False
    if isinstance(a, tuple) and a and isinstance(a[0], HistoryEntry):
        return all(
            (x.at is None and y.at is None)
            or (x.at is not None and y.at is not None and x.at.utcoffset() == y.at.utcoffset())
            for x, y in zip(a, b, strict=True)
        )
    return True


_OFFSETS = st.one_of(
    st.none(), st.just(UTC),
    st.integers(-14 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m))),
)
_DATETIMES = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=_OFFSETS
)
_ISO = st.one_of(
    _DATETIMES.map(lambda d: d.isoformat()),
    _DATETIMES.map(lambda d: d.isoformat(sep=" ")),
    _DATETIMES.map(lambda d: d.isoformat(timespec="minutes")),
    _DATETIMES.map(lambda d: d.isoformat(timespec="hours")),
    _DATETIMES.map(lambda d: d.isoformat().replace("+00:00", "Z")),
    _DATETIMES.map(lambda d: d.strftime("%Y%m%dT%H%M%S")),
    _DATETIMES.map(lambda d: d.date().isoformat()),
    _DATETIMES.map(lambda d: d.isoformat() + "123"),  # more than six fractional digits
    st.from_regex(r"\A[0-9T:+\-. Z]{0,32}\Z"),
    st.text(max_size=40),
)
_AT = st.one_of(_ISO, st.none(), st.integers(-(10**12), 10**12), st.floats(allow_nan=False),
                st.booleans())
_ENTRY = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["user", "assistant", "tool"]), st.text(max_size=8)),
     "text": st.one_of(st.text(max_size=60), st.integers(), st.none())},
    optional={"at": _AT, "extra": st.integers()},
)


@settings(max_examples=600, deadline=None)
@given(st.lists(_ENTRY, max_size=6))
def test_text_gives_what_the_decoded_dicts_gave(entries: list[dict[str, Any]]) -> None:
    """Histories as the database writes them back (``jsonb``'s text), with any ``at`` a
    channel might have stored: both ways give the engine the same thing."""
    text = json.dumps(entries, ensure_ascii=False)
    assert _same(_text_way(text), _decoded_way(text))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=80), st.binary(max_size=80).map(lambda b: b.decode("latin-1"))))
def test_any_text_is_taken_as_the_decoder_took_it(text: str) -> None:
    """Text that is not a history (not JSON, not a list, anything) gives the decoder's error
    or what validating the decoder's value gave; never another outcome, never another error."""
    assert _same(_text_way(text), _decoded_way(text))


async def test_a_load_as_text_is_the_load_decoded(store: Store) -> None:
    """Twelve sessions with messages, bursts' worth of replies and wakes that send nothing,
    loaded together as text and decoded: the same entries for each, none of another's."""
    sessions = [f"text-{n}" for n in range(12)]
    for turn in range(5):
        for n, sid in enumerate(sessions):
            message = None if (turn + n) % 3 == 0 else f"{sid}: m{turn}"
            replies = [f"{sid}: r{turn}.{i}" for i in range((turn + n) % 3)]
            await store.save_turn(save_request(sid, turn, message=message, replies=replies))
    asks = [LoadRequest(sid) for sid in sessions]
    as_text = await store.load_many(asks, history_limit=7, history_as_text=True)
    decoded = await store.load_many(asks, history_limit=7)
    for sid, text, plain in zip(sessions, as_text, decoded, strict=True):
        assert text.history == [] and text.history_json is not None
        assert plain.history_json is None and plain.history
        entries = entries_of_text(text.history_json)
        assert isinstance(entries, tuple)
        assert _same(entries, _ENTRIES.validate_python(plain.history))
        assert all(e.text.startswith(f"{sid}: ") for e in entries)
    # A held window is left out either way: no text, no entries.
    held = await store.load_many([LoadRequest(sessions[0], history_version=5)],
                                 history_limit=7, history_as_text=True)
    assert held[0].history_held and held[0].history_json is None and held[0].history == []
