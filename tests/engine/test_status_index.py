"""``TurnState.asking``, ``suspended``, ``asker`` and ``most_recently_suspended`` answer from
an index kept in step with the runs: after any sequence of the writes a turn makes, each
equals the plain scan of ``session.runs`` it replaced."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import Agent, FakeClock, MockProvider
from engine.phases import load
from engine.request import TurnRequest
from engine.session import Run
from engine.state import TurnState

START = "2026-01-05T09:00:00Z"
STATUSES = ("running", "asking", "waiting", "suspended")
FLOWS = ("f", "g", "h")
ENGINE = Path(__file__).resolve().parents[2] / "engine"

AGENT = Agent(
    name="Ana",
    provider=MockProvider([]),
    clock=FakeClock(START),
    idle="silent",
    flows=[{"id": f, "steps": [{"id": "a", "say": "oi"}]} for f in FLOWS],
)


def scanned(state: TurnState) -> dict[str, Any]:
    """What the queries answered before the indexes: plain scans of the run list."""
    runs = state.session.runs
    asking = [r for r in runs if r.status == "asking"]
    suspended = [r for r in runs if r.status == "suspended"]
    return {
        "asking": asking,
        "asker": asking[-1] if asking else None,
        "suspended": suspended,
        "most_recently_suspended": (
            max(suspended, key=lambda r: r.suspended_seq or 0) if suspended else None
        ),
    }


def indexed(state: TurnState) -> dict[str, Any]:
    return {
        "asking": state.asking(),
        "asker": state.asker(),
        "suspended": state.suspended(),
        "most_recently_suspended": state.most_recently_suspended(),
    }


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal by identity: the same run objects, in the same order."""
    if a.keys() != b.keys():
        return False
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, list):
            if len(x) != len(y) or any(p is not q for p, q in zip(x, y, strict=True)):
                return False
        elif x is not y:
            return False
    return True


def state_with(statuses: list[tuple[str, str, int | None]]) -> TurnState:
    session = {
        "id": "s1",
        "v": 4,
        "seq": 100,
        "runs": [
            {
                "id": f"r{i}",
                "flow_id": flow,
                "status": status,
                "step_id": "a",
                "started_at": START,
                "suspended_seq": seq,
            }
            for i, (flow, status, seq) in enumerate(statuses)
        ],
    }
    request = TurnRequest.parse({"session_id": "s1", "message": "oi", "session": session})
    return asyncio.run(load.run(AGENT.config, request))


runs_strategy = st.lists(
    st.tuples(
        st.sampled_from(FLOWS), st.sampled_from(STATUSES), st.one_of(st.none(), st.integers(0, 3))
    ),
    max_size=6,
)
ops_strategy = st.lists(
    st.tuples(
        st.sampled_from(
            ["set_status", "suspend", "park", "new_run", "end_run", "query", "new_list"]
        ),
        st.integers(0, 20),
        st.sampled_from(STATUSES),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(runs_strategy, ops_strategy)
def test_indexes_equal_the_scans_after_any_writes(
    runs: list[tuple[str, str, int | None]], ops: list[tuple[str, int, str]]
) -> None:
    state = state_with(runs)
    assert same(indexed(state), scanned(state))
    ended: list[Run] = []
    for op, pick, status in ops:
        live = state.session.runs
        target = live[pick % len(live)] if live else None
        if op == "set_status" and target is not None:
            state.set_status(target, status)  # type: ignore[arg-type]
        elif op == "set_status" and ended:  # a run that already left the session
            state.set_status(ended[pick % len(ended)], status)  # type: ignore[arg-type]
        elif op == "suspend" and target is not None:
            state.suspend(target)
        elif op == "park" and target is not None:
            state.park(target, key=f"k{pick}", kind="timer", at=state.now)
        elif op == "new_run":
            flow = AGENT.config.flow_map[FLOWS[pick % len(FLOWS)]]
            state.new_run(flow, origin="start", trigger=None, input={}, reason="test")
        elif op == "end_run" and target is not None:
            state.end_run(target, "completed")
            ended.append(target)
        elif op == "new_list":
            state.session.runs = list(reversed(live))
        # Every write above may be followed by a query or not: "query" checks mid-sequence.
        if op == "query" or pick % 3 == 0:
            assert same(indexed(state), scanned(state))
    assert same(indexed(state), scanned(state))


@pytest.mark.unchecked_status_index
def test_a_status_written_behind_the_index_would_be_missed() -> None:
    """Why every write goes through ``set_status``: the index does not watch the runs."""
    state = state_with([("f", "waiting", None), ("g", "waiting", None)])
    assert state.asking() == []
    state.session.runs[0].status = "asking"  # not through set_status
    assert state.asking() == []  # stale: this is what the source check below prevents
    state.set_status(state.session.runs[1], "asking")
    assert state.asking() == [state.session.runs[1]]


def _status_writes(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, enclosing function) of each assignment to an attribute named ``status``, of
    each ``setattr(..., "status", ...)`` and of each ``write(..., status=...)``."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = function
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = child.name
            targets: list[ast.AST] = []
            if isinstance(child, ast.Assign):
                targets = list(child.targets)
            elif isinstance(child, ast.AugAssign | ast.AnnAssign):
                targets = [child.target]
            while targets:
                target = targets.pop()
                if isinstance(target, ast.Tuple | ast.List):
                    targets.extend(target.elts)
                elif isinstance(target, ast.Starred):
                    targets.append(target.value)
                elif isinstance(target, ast.Attribute) and target.attr == "status":
                    found.append((child.lineno, function))
            if (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Name)
                and child.func.id == "setattr"
                and len(child.args) > 1
                and isinstance(child.args[1], ast.Constant)
                and child.args[1].value == "status"
            ):
                found.append((child.lineno, function))
            if (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Name | ast.Attribute)
                and (child.func.id if isinstance(child.func, ast.Name) else child.func.attr)
                == "write"
                and any(keyword.arg == "status" for keyword in child.keywords)
            ):
                found.append((child.lineno, function))
            visit(child, name)

    visit(tree, "<module>")
    return found


def test_the_engine_writes_a_run_status_only_through_set_status() -> None:
    allowed = {("state.py", "set_status"), ("errors.py", "__init__")}  # errors: an HTTP status
    stray = []
    for path in sorted(ENGINE.rglob("*.py")):
        for line, function in _status_writes(ast.parse(path.read_text(), str(path))):
            if (path.name, function) not in allowed:
                stray.append(f"{path.relative_to(ENGINE.parent)}:{line} in {function}")
    assert stray == []


def test_the_source_check_finds_a_direct_write() -> None:
    source = (
        "def f(run):\n    run.status = 'asking'\n    a.status, b = 1, 2\n"
        "    held[run.status] = 1\n    setattr(run, 'status', 'asking')\n"
        "    write(run, status='asking')\n    records.write(run, visit=2, status='asking')\n"
        "    write(run, visit=2)\n"
    )
    assert _status_writes(ast.parse(source)) == [(2, "f"), (3, "f"), (5, "f"), (6, "f"), (7, "f")]
