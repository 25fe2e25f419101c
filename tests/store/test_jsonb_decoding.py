"""jsonb columns are decoded by ``jsoncodec.loads`` (pydantic-core's parser) on every connection,
and that parser reads whatever jsonb writes exactly as the standard library's ``json.loads``
would: the same types, the same values, the same refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_core import from_json
from sqlalchemy import text

from store import Store, jsoncodec
from tests.store.builders import save_request

# Numbers PostgreSQL rewrites when it stores them: exponents spelled out in full, a negative
# zero, trailing zeros kept, more digits than a double holds.
_AWKWARD_NUMBERS = (
    "1e400", "1.5e-300", "0.1000000000000000000000001", "-0", "-0.0",
    "12345678901234567890123", "1E2", "-1.0e-5", "1e-400", "2.50", "9007199254740993",
)


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (1 == 1.0 == True would hide a change)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


async def _as_jsonb(store: Store, literal: str) -> tuple[Any, str]:
    """``literal`` cast to jsonb: the value the connection's codec decoded, and jsonb's text."""
    async with store.engine.connect() as connection:
        row = (
            await connection.execute(
                text("SELECT CAST(:v AS jsonb) AS value, CAST(:v AS jsonb)::text AS shown"),
                {"v": literal},
            )
        ).one()
    return row.value, row.shown


async def test_loads_go_through_the_codec(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session load decodes its jsonb through ``jsoncodec.loads``, not ``json.loads``."""
    await store.save_turn(save_request("s1", 0, state={"id": "s1", "data": {"n": 1}}))
    calls: list[int] = []

    def counting(value: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return from_json(value, *args, **kwargs)

    monkeypatch.setattr(jsoncodec, "from_json", counting)
    loaded = await store.load("s1")
    assert loaded.state == {"id": "s1", "data": {"n": 1}}
    assert calls, "the load decoded its jsonb without jsoncodec.loads"


@pytest.mark.parametrize("number", _AWKWARD_NUMBERS)
async def test_numbers_as_jsonb_writes_them(store: Store, number: str) -> None:
    value, shown = await _as_jsonb(store, f"[{number}]")
    assert _same(value, json.loads(shown)), (number, shown, value)


async def test_a_number_too_long_for_python_is_refused_by_both(store: Store) -> None:
    """jsonb holds integers of more digits than Python reads by default (4,300): both parsers
    refuse them with a ValueError, so a row holding one fails its load the same way."""
    async with store.engine.connect() as connection:
        shown = (await connection.execute(text("SELECT '[1e5000]'::jsonb::text"))).scalar_one()
    with pytest.raises(ValueError):
        json.loads(shown)
    with pytest.raises(ValueError):
        jsoncodec.loads(shown)


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(
        st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                max_size=8),
        inner,
        max_size=4,
    ),
    max_leaves=12,
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(value=_json_values)
async def test_any_jsonb_value_decodes_as_the_standard_library_reads_it(
    store: Store, value: Any
) -> None:
    value_back, shown = await _as_jsonb(store, jsoncodec.dumps(value))
    assert _same(value_back, json.loads(shown)), (value, shown, value_back)


async def test_a_value_nested_past_the_fast_parser_still_loads(store: Store) -> None:
    """pydantic-core's parser stops at about 200 levels; jsonb holds more (a session written
    before the consumer refused deep records, or by a host's own code), and such a value must
    still load, as the standard library reads it."""
    deep = "[" * 300 + "1" + "]" * 300
    with pytest.raises(ValueError):
        from_json(deep)
    value, shown = await _as_jsonb(store, deep)
    assert _same(value, json.loads(shown)) and _same(value, json.loads(deep))


@given(value=st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),  # any code point, lone surrogates too
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
))
def test_any_text_is_written_as_json_utf8_can_encode_and_jsonb_can_hold(value: Any) -> None:
    """Whatever strings a value holds, NULs and lone surrogates included, ``dumps`` writes JSON
    that encodes as UTF-8, holds no escaped NUL, and reads back as the value with each of those
    characters replaced by U+FFFD."""
    encoded = jsoncodec.dumps(value)
    encoded.encode("utf-8")
    assert "\\u0000" not in encoded.replace("\\\\", "")

    def cleaned(item: Any) -> Any:
        if isinstance(item, str):
            return "".join("\ufffd" if c == "\x00" or "\ud800" <= c <= "\udfff" else c
                           for c in item)
        if isinstance(item, list):
            return [cleaned(i) for i in item]
        if isinstance(item, dict):
            return {cleaned(k): cleaned(v) for k, v in item.items()}
        return item

    assert json.loads(encoded) == cleaned(value)
