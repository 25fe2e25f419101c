"""Reading do-handler and tool results (engine/actions.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine import ToolResult, defer, failed, ok, skipped
from engine.actions import (
    ActionContext,
    ActionResult,
    action_context,
    call_handler,
    read_result,
    read_tool_result,
)


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (None, "ok"),
        (True, "ok"),
        ({"ok": True}, "ok"),
        ({"skipped": True, "reason": "r"}, "skipped"),
        ({"failed": "down"}, "failed"),
        ({"failed": True, "reason": "x"}, "failed"),
        ({"defer": 5000}, "defer"),
        ({"defer": {"ms": 100}}, "defer"),
        ({"defer": True}, "defer"),
        (ok(spoke=True), "ok"),
        (skipped("x"), "skipped"),
        (failed("x"), "failed"),
        (defer(ms=1), "defer"),
        ("weird", "failed"),
        ({"other": 1}, "failed"),
    ],
)
def test_results_read_into_one_shape(value: Any, kind: str) -> None:
    """Handlers return ok(), skipped(), failed() or defer(); plain dicts are accepted too."""
    assert read_result(value).kind == kind


def test_dict_results_keep_their_details() -> None:
    """{ ok } may carry spoke and a data patch; { defer } its delay; reasons travel."""
    assert read_result({"ok": True, "spoke": True, "data": {"a": 1}}).data == {"a": 1}
    assert read_result({"ok": True, "spoke": True}).spoke is True
    assert read_result({"defer": {"ms": 100}}).ms == 100
    assert read_result({"skipped": True, "reason": "r"}).reason == "r"
    assert read_result({"skipped": "why"}).reason == "why"


async def test_call_handler_takes_sync_async_and_fewer_arguments() -> None:
    """A do handler is fn(ctx) (sync or async); tool handlers may take (args) or (args, ctx)."""

    async def two(a: int, b: int) -> int:
        return a + b

    assert await call_handler(lambda a: a, 1, 2) == 1
    assert await call_handler(two, 1, 2) == 3
    assert await call_handler(lambda *args: len(args), 1, 2, 3) == 3
    assert await call_handler(lambda: "none", 1) == "none"
    assert await call_handler(max, 1, 2) == 2


def test_tool_results() -> None:
    """A tool handler returns a result for the model and may return a data patch written as
    given."""
    assert read_tool_result({"data": {"a": 1}, "result": "ok"}) == ToolResult("ok", {"a": 1})
    assert read_tool_result({"data": {"a": 1}, "n": 2}) == ToolResult({"n": 2}, {"a": 1})
    assert read_tool_result([1, 2]) == ToolResult([1, 2], None)
    given = ToolResult("x")
    assert read_tool_result(given) is given


def _same(fast: Any, slow: Any) -> None:
    assert type(fast) is type(slow)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert list(vars(fast).items()) == list(vars(slow).items())
    for name, value in vars(slow).items():
        assert vars(fast)[name] is value, name


values = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5))


@given(spoke=values, data=st.one_of(st.none(), st.dictionaries(st.text(max_size=3), values)),
       reason=values, ms=values)
def test_results_are_the_constructed_results(spoke: Any, data: Any, reason: Any, ms: Any) -> None:
    """``ok``, ``skipped``, ``failed`` and ``defer`` fill the frozen result directly: the same
    object the dataclass's own constructor builds, whatever they are given."""
    data = None if data is None else frozenset(data.items())  # hashable, as the result is
    _same(ok(spoke, data), ActionResult("ok", spoke=spoke, data=data))
    _same(skipped(reason), ActionResult("skipped", reason=reason))
    _same(failed(reason), ActionResult("failed", reason=reason))
    _same(defer(ms), ActionResult("defer", ms=ms))
    assert ok() == ActionResult("ok") and skipped() == ActionResult("skipped", reason="")


@given(st.lists(values, min_size=10, max_size=10))
def test_action_context_is_the_constructed_context(given_: list[Any]) -> None:
    names = [f.name for f in dataclasses.fields(ActionContext)]
    _same(action_context(*given_), ActionContext(**dict(zip(names, given_, strict=True))))
    with pytest.raises(dataclasses.FrozenInstanceError):
        action_context(*given_).key = "other"  # type: ignore[misc]
