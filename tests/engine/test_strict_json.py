"""Model replies decoded as JSON defines it (engine/strict_json.py)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine import FieldSpec
from engine.strict_json import depth, loads
from engine.values import BadValue, coerce


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a": -Infinity}', "1e999", "[-1e400]"])
def test_numbers_json_does_not_define_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        loads(text)
    json.loads(text)  # which the standard library would have read


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


@given(st.one_of(st.text(), st.binary()))
def test_any_text_decodes_to_finite_json_or_is_refused(text: str | bytes) -> None:
    """Any text or bytes: JSON with finite numbers only, or ``ValueError`` (as for text that is
    not JSON); nothing else escapes."""
    try:
        value = loads(text)
    except (ValueError, RecursionError):
        return
    assert _finite(value)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=10))
def test_what_json_holds_is_read_back_and_the_rest_refused(value: Any) -> None:
    text = json.dumps(value)  # writes NaN and Infinity for non-finite floats
    if _finite(value):
        assert loads(text) == value
    else:
        with pytest.raises(ValueError):
            loads(text)


@pytest.mark.parametrize("kind", ["number", "integer", "string"])
def test_an_integer_past_any_float_is_a_bad_value_or_text(kind: str) -> None:
    """A model may answer a number field with 10**400 (valid JSON): a bad value, not an
    ``OverflowError`` out of the turn."""
    huge = 10**400
    if kind == "string":
        assert coerce("n", FieldSpec(type=kind), huge) == str(huge)
        return
    with pytest.raises(BadValue) as caught:
        coerce("n", FieldSpec(type=kind), huge)
    assert caught.value.code == "bad-value"


def _nested(levels: int) -> Any:
    value: Any = "leaf"
    for level in range(levels):
        value = {"k": value} if level % 2 else [value]
    return value


@pytest.mark.parametrize("levels", [0, 1, 2, 64, 65, 500])
def test_depth_counts_objects_and_lists_and_stops_past_a_limit(levels: int) -> None:
    value = {"flat": 1, "deep": _nested(levels), "other": [[]]}
    assert depth(value) == max(1 + levels, 3)
    limited = depth(value, 64)
    # Past the limit the walk may stop early, but the answer stays on the same side of it.
    assert (limited > 64) == (depth(value) > 64)
    assert limited <= depth(value)
    assert depth("text") == 0


def _outcome(decode: Any, text: Any) -> tuple[str, Any]:
    try:
        return "value", decode(text)
    except (ValueError, TypeError, RecursionError) as exc:
        return type(exc).__name__, str(exc)


def _standard(text: Any) -> Any:
    """What ``loads`` stands for: ``json.loads`` with its two refusals, a decoder built anew."""
    from engine.strict_json import _finite_float, _refuse_constant

    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)


@given(st.one_of(
    st.text(), st.binary(),
    st.text().map(lambda t: "\ufeff" + t),
    st.text().map(lambda t: t.encode("utf-16")), st.text().map(lambda t: t.encode("utf-32")),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                 lambda inner: st.lists(inner, max_size=3)
                 | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                 max_leaves=10).map(json.dumps),
    st.integers() | st.none(),
))
def test_the_shared_decoder_reads_and_refuses_as_json_loads_does(text: Any) -> None:
    """Text with a BOM, bytes in any UTF the standard library detects, JSON and not, other
    types: the same value, or the same error with the same message, as ``json.loads``."""
    assert _outcome(loads, text) == _outcome(_standard, text)
