"""Reading do-handler and tool results (engine/actions.py)."""

from __future__ import annotations

from typing import Any

import pytest

from engine import ToolResult, defer, failed, ok, skipped
from engine.actions import call_handler, read_result, read_tool_result


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
