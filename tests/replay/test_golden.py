"""Golden files: conversations written to JSON and read back replay the same, and a broken
file is refused with a reason, never a crash."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay import Conversation, record_conversation
from replay.golden import (
    GoldenFileError,
    file_name,
    golden_json,
    parse_golden,
    read_directory,
    write_golden,
)
from replay.session import replay_many
from tests.replay.support import demo, script, step


async def _recorded(count: int) -> list[Conversation]:
    agent = demo()
    return list(await asyncio.gather(
        *(record_conversation(agent, f"s-{n}", script(n)) for n in range(count))))


async def test_golden_files_round_trip_and_replay_identical(tmp_path: Path) -> None:
    """Written and read back, a conversation is the same conversation and replays identical;
    a reworded agent departs on the same files."""
    conversations = await _recorded(8)
    for conversation in conversations:
        write_golden(conversation, tmp_path)
    back = read_directory(tmp_path)
    assert sorted(c.session_id for c in back) == sorted(c.session_id for c in conversations)
    by_id = {c.session_id: c for c in back}
    for conversation in conversations:
        assert golden_json(by_id[conversation.session_id]) == golden_json(conversation)
    summary = await replay_many(demo(), back)
    assert summary.counts()["identical"] == 8

    def reword(flows: list[dict[str, Any]]) -> None:
        step(flows, "booking", "summary")["say"] = "{{service}} on {{day}}, right?"

    changed = await replay_many(demo(reword), back)
    assert changed.counts()["changed"] == 7  # every booking (all but s-4) reaches it


def test_file_names_are_safe_and_distinct() -> None:
    """Session ids become file names without path separators, two ids never share one."""
    names = {file_name(s) for s in ("a/b", "a_b", "../../etc", "", "ü", "a b")}
    assert len(names) == 6
    assert all("/" not in n and not n.startswith(".") for n in names)


@pytest.mark.parametrize("raw, problem", [
    (b"\xff\xfe", "not UTF-8"),
    (b"{", "not JSON"),
    (b"[]", "not a turnflow replay file"),
    (json.dumps({"format": "turnflow-replay", "version": 1, "session_id": "s",
                 "turns": [{"version": 0, "at": "2026-01-01T00:00:00Z", "input": {},
                            "recorded": {}}]}).encode(), "turns.0.version"),
    (json.dumps({"format": "turnflow-replay", "version": 1, "session_id": "s",
                 "turns": [{"version": 1, "at": "secret text", "input": {},
                            "recorded": {}}]}).encode(), "turns.0.at"),
])
def test_a_broken_file_is_refused_with_a_reason(raw: bytes, problem: str) -> None:
    """Each kind of damage names what is wrong and where, without quoting the content."""
    with pytest.raises(GoldenFileError) as caught:
        parse_golden(raw, name="x.json")
    assert problem in str(caught.value) and str(caught.value).startswith("x.json: ")
    assert "secret text" not in str(caught.value)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_are_refused_or_accepted_never_raise(raw: bytes) -> None:
    """Any bytes at all: a conversation or a GoldenFileError."""
    try:
        assert isinstance(parse_golden(raw), Conversation)
    except GoldenFileError:
        pass


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(turns=st.lists(st.dictionaries(
    st.sampled_from(["version", "at", "logged_at", "input", "calls", "recorded", "extra"]),
    _JSON | st.just("2026-01-01T00:00:00Z") | st.integers(1, 5), max_size=7), max_size=3),
    session=_JSON)
def test_arbitrary_file_shapes_are_refused_or_accepted_never_raise(
    turns: list[dict[str, Any]], session: Any
) -> None:
    """Well-formed JSON of any shape in the file's frame: a conversation or a reason."""
    raw = json.dumps({"format": "turnflow-replay", "version": 1, "session_id": session,
                      "turns": turns}).encode()
    try:
        assert isinstance(parse_golden(raw), Conversation)
    except GoldenFileError as exc:
        assert str(exc)


_CALL = st.fixed_dictionaries({"kind": st.sampled_from(["understand", "speak", "compact", "x"])},
                              optional={"ok": st.booleans(), "reply": _JSON,
                                        "error_kind": _JSON})


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(inputs=st.lists(st.dictionaries(st.sampled_from(
    ["message", "wake", "event", "key", "id", "at", "payload", "start", "context"]),
    _JSON, max_size=4), min_size=1, max_size=3),
    calls=st.lists(st.none() | st.lists(_CALL, max_size=3), min_size=3, max_size=3))
def test_any_readable_golden_file_replays_to_a_report_never_an_exception(
    inputs: list[dict[str, Any]], calls: list[Any]
) -> None:
    """Whatever inputs and recorded calls a readable file holds, the replay reports on it
    (identical, changed with a reason, or skipped); nothing escapes the loop."""
    turns = [{"version": v, "at": "2026-01-01T00:00:00Z", "input": spec,
              "calls": calls[v - 1], "recorded": {}} for v, spec in enumerate(inputs, start=1)]
    raw = json.dumps({"format": "turnflow-replay", "version": 1, "session_id": "h",
                      "turns": turns}, default=str).encode()
    try:
        conversation = parse_golden(raw)
    except GoldenFileError:
        return
    summary = asyncio.run(replay_many(demo(), [conversation]))
    [report] = summary.reports
    assert report.status in ("identical", "changed", "skipped")
    if report.status == "changed":
        assert report.departure is not None and report.departure.differences
