"""An accepted change does not end a conversation's comparison: later departures are still
found while the state the next turn starts from is the recorded one, and a conversation whose
state diverged is undecidable past that turn and fails unless allowed."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from consumer.cli import main
from replay import Conversation, record_conversation
from replay.golden import file_name, read_directory, write_golden
from replay.pytest import replays
from replay.report import Expectations, junit_xml, report_json, report_text
from replay.session import replay_many
from tests.replay.agents import reworded, reworded_without_brake_note
from tests.replay.support import demo, script

BRAKES = {2, 5}  # conversations of ``script`` that book brakes at their third turn


async def _recorded(count: int) -> list[Conversation]:
    agent = demo()
    return list(await asyncio.gather(
        *(record_conversation(agent, f"s-{n}", script(n)) for n in range(count))))


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("golden")

    async def record() -> None:
        for conversation in await _recorded(8):
            write_golden(conversation, directory)

    asyncio.run(record())
    return directory


async def test_a_behaviour_change_after_an_accepted_wording_change_fails(golden: Path) -> None:
    """Golden files, both edits of the walk-through: the greeting departs at turn 1 (accepted),
    and every brakes booking still departs at turn 3 with the note gone (not accepted)."""
    with pytest.raises(AssertionError) as failed:
        await replays(reworded_without_brake_note(), golden, expect=["messages"])
    said = str(failed.value)
    for n in BRAKES:
        assert f"expected change: s-{n} departs at turn 1 of" in said
        assert f"CHANGED: s-{n} departs at turn 3 of" in said
    assert "- verbatim: Brake jobs take about two hours; please bring the bike in the morning." \
        in said
    # Without the brake edit the same run passes: the wording change alone is accepted, and
    # the comparison went on to the end of every conversation.
    summary = await replays(reworded(), golden, expect=["messages"])
    assert summary.ok and summary.counts()["undecidable"] == 0
    assert all(r.replayed == r.turns for r in summary.reports)


async def test_each_conversation_keeps_its_own_departures() -> None:
    """Many conversations replayed together: each report lists exactly its own departures,
    the greeting (turn 1, when it greets) and the turn whose recorded reply held the brake
    note, and the same as when it is replayed alone."""
    conversations = await _recorded(20)
    expect = Expectations.parse(["messages"])
    summary = await replay_many(reworded_without_brake_note(), conversations, expectations=expect)
    noted = 0
    for conversation, report in zip(conversations, summary.reports, strict=True):
        assert report.session_id == conversation.session_id
        said = [" ".join(m["text"] for m in t.recorded.messages) for t in conversation.turns]
        wanted = [1] if "Ana from Spoke" in said[0] else []
        wanted += [i for i, text in enumerate(said, start=1) if "Brake jobs take" in text][:1]
        noted += len(wanted) == 2
        assert [d.turn for d in report.departures] == wanted, report.session_id
        alone = await replay_many(reworded_without_brake_note(), [conversation],
                                  expectations=expect)
        assert [d.turn for d in alone.reports[0].departures] == wanted
    assert noted >= 4  # several conversations reach the note after an accepted greeting
    assert not summary.ok


async def test_an_accepted_change_that_leaves_another_state_is_undecidable() -> None:
    """Accepting messages and outcomes accepts the brake note's removal, but the booking's
    state after it is not the recorded one: the later turns cannot be compared, the
    conversation is undecidable past turn 3 and fails, unless the run allows it."""
    conversations = [c for c in await _recorded(6) if c.session_id in ("s-2", "s-3")]
    accepting = Expectations.parse(["messages", "outcomes"])
    summary = await replay_many(reworded_without_brake_note(), conversations,
                                expectations=accepting)
    brakes = {r.session_id: r for r in summary.reports}["s-2"]
    assert brakes.undecidable_after == 3 and brakes.replayed == 3 < brakes.turns
    assert [r.session_id for r in summary.unexpected()] == ["s-2"]
    text = report_text(summary)
    assert "UNDECIDABLE: s-2 past turn 3 of 4: the state this turn left differs" in text
    assert "1 undecidable" in text
    body = json.loads(report_json(summary))
    entry = {c["session_id"]: c for c in body["conversations"]}["s-2"]
    assert entry["undecidable_after"] == 3 and not entry["expected"]
    assert [d["turn"] for d in entry["departures"]] == [1, 3]
    assert all(d["expected"] for d in entry["departures"])
    assert "undecidable past turn 3" in junit_xml(summary)

    allowing = Expectations.parse(["messages", "outcomes"], allow_undecidable=True)
    allowed = await replay_many(reworded_without_brake_note(), conversations,
                                expectations=allowing)
    assert allowed.ok
    assert "undecidable: s-2 past turn 3 of 4" in report_text(allowed)


async def test_a_recording_without_state_is_undecidable_after_a_departure() -> None:
    """A turn logged before states were recorded gives nothing to compare the replayed state
    with: an accepted change there cannot be followed, and says why."""
    [conversation] = [c for c in await _recorded(3) if c.session_id == "s-1"]
    stripped = Conversation(conversation.session_id, [
        dataclasses.replace(t, recorded=dataclasses.replace(t.recorded, state=None))
        for t in conversation.turns])
    summary = await replay_many(reworded(), [stripped],
                                expectations=Expectations.parse(["messages"]))
    [report] = summary.reports
    assert report.undecidable_after == 1
    assert "keeps no state for this turn" in report.undecidable_reason
    assert not summary.ok


def test_the_command_line_fails_the_walk_through_and_takes_allow_undecidable(
    golden: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["replay", "--agent", "tests.replay.agents:reworded_without_brake_note",
            "--from", str(golden)]
    assert main([*base, "--expect-changes", "messages"]) == 1
    out = capsys.readouterr().out
    assert "CHANGED: s-2 departs at turn 3 of 4" in out
    assert main([*base, "--expect-changes", "messages", "outcomes"]) == 1
    assert "UNDECIDABLE: s-2 past turn 3" in capsys.readouterr().out
    assert main([*base, "--expect-changes", "messages", "outcomes", "--allow-undecidable"]) == 0


def test_golden_files_are_named_after_their_session(tmp_path: Path) -> None:
    """``walk-1`` is written as ``walk-1.json``, as the docs say; an id a file name cannot hold
    as it is, and an id whose name another session's file already has (two ids that differ
    only in case, on a file system that ignores case), get a hashed name instead."""
    assert file_name("walk-1") == "walk-1.json"
    assert file_name("a/b").startswith("a_b~") and file_name("..").startswith("session~")

    async def record(session: str) -> Any:
        return await record_conversation(demo(), session, script(4))

    first = write_golden(asyncio.run(record("walk-1")), tmp_path)
    # What a file system that ignores case shows under the other spelling: walk-1's file.
    (tmp_path / "Walk-1.json").write_bytes(first.read_bytes())
    path = write_golden(asyncio.run(record("Walk-1")), tmp_path)
    assert path.name.startswith("Walk-1~")
    assert sorted(c.session_id for c in read_directory(tmp_path)) == ["Walk-1", "walk-1",
                                                                      "walk-1"]
    again = write_golden(asyncio.run(record("walk-1")), tmp_path)  # re-exported: same file
    assert again == first
