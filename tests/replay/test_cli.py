"""``turnflow replay --from DIR``: golden files replayed from the command line, for CI."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from xml.etree import ElementTree

import pytest

from consumer.cli import main
from replay import record_conversation
from replay.golden import write_golden
from tests.replay.support import demo, script


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six recorded demo conversations as golden files."""
    directory = tmp_path_factory.mktemp("golden")

    async def record() -> None:
        agent = demo()
        for n in range(6):
            write_golden(await record_conversation(agent, f"s-{n}", script(n)), directory)

    asyncio.run(record())
    return directory


def test_an_unchanged_agent_passes(golden: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The agent the files were recorded with replays them all identical: exit 0."""
    assert main(["replay", "--agent", "tests.replay.agents:same", "--from", str(golden)]) == 0
    out = capsys.readouterr().out
    assert "replayed 6 conversations" in out and "6 identical, 0 changed" in out


def test_a_change_fails_with_the_diff_and_writes_ci_reports(
    golden: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reworded greeting exits 1, prints where each conversation departs and writes the
    same in JSON and JUnit XML."""
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    code = main(["replay", "--agent", "tests.replay.agents:reworded", "--from", str(golden),
                 "--json", str(report), "--junit", str(junit)])
    out = capsys.readouterr().out
    assert code == 1
    assert "CHANGED: s-0 departs at turn 1 of 5" in out
    assert "- verbatim: Hi! I'm Ana from Spoke & Chain bike repair." in out
    body = json.loads(report.read_text())
    assert body["summary"]["changed"] == 5 and body["summary"]["identical"] == 1
    suite = ElementTree.fromstring(junit.read_text())
    assert suite.get("failures") == "5"


def test_expected_changes_do_not_fail_the_run(golden: Path) -> None:
    """Wording changes declared expected pass; a session list narrows the run."""
    assert main(["replay", "--agent", "tests.replay.agents:reworded", "--from", str(golden),
                 "--expect-changes", "messages"]) == 0
    assert main(["replay", "--agent", "tests.replay.agents:reworded", "--from", str(golden),
                 "--session", "s-4"]) == 0  # the opening-hours question never greets


def test_bad_arguments_exit_2_with_a_reason(
    golden: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing agent, an object that is not an engine agent and a broken golden file each
    exit 2 with one line naming the problem."""
    assert main(["replay", "--from", str(golden)]) == 2
    assert "--agent" in capsys.readouterr().err
    assert main(["replay", "--agent", "tests.replay.agents:not_an_agent", "--from",
                 str(golden)]) == 2
    assert "not an engine.Agent" in capsys.readouterr().err
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "x.json").write_text('{"format": "turnflow-replay"', encoding="utf-8")
    assert main(["replay", "--agent", "tests.replay.agents:same", "--from", str(broken)]) == 2
    assert "x.json: not JSON" in capsys.readouterr().err


def test_the_pytest_helper_fails_on_a_change_and_passes_otherwise(golden: Path) -> None:
    """``assert_replays`` raises with the report when a golden conversation changed."""
    from replay.pytest import assert_replays
    from tests.replay.agents import reworded, same

    assert assert_replays(same(), golden).counts()["identical"] == 6
    with pytest.raises(AssertionError, match="departs at turn 1"):
        assert_replays(reworded(), golden)
    assert assert_replays(reworded(), golden, expect=["messages"]).counts()["changed"] == 5


def test_golden_files_are_chosen_like_logged_conversations(
    golden: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--since``/``--until`` keep conversations with a turn in the window; ``--sample`` picks
    the same N for the same seed."""
    # script(n) starts at 09:00 + 7n minutes: s-0..s-5 from 09:00 to 09:35
    assert main(["replay", "--agent", "tests.replay.agents:same", "--from", str(golden),
                 "--since", "2026-03-02T09:20:00Z", "--until", "2026-03-02T09:30:00Z"]) == 0
    assert "replayed 2 conversations" in capsys.readouterr().out  # s-3 (09:21), s-4 (09:28)
    runs = []
    for _ in range(2):
        main(["replay", "--agent", "tests.replay.agents:reworded", "--from", str(golden),
              "--sample", "3", "--seed", "7"])
        runs.append(capsys.readouterr().out)
    assert runs[0] == runs[1] and "replayed 3 conversations" in runs[0]


@pytest.mark.parametrize("option", ["--json", "--junit"])
def test_a_report_path_in_a_missing_directory_exits_2_before_replaying(
    option: str, golden: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--json``/``--junit`` in a directory that does not exist is refused before the replay
    runs (its report was lost to a traceback after it)."""
    target = tmp_path / "missing" / "report.out"
    assert main(["replay", "--agent", "tests.replay.agents:same", "--from", str(golden),
                 option, str(target)]) == 2
    captured = capsys.readouterr()
    assert f"{option} {target}: the directory {target.parent} does not exist" in captured.err
    assert "replayed" not in captured.out


def test_a_negative_history_limit_is_refused(
    golden: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--history-limit`` is a count of transcript entries: -1 exits 2 naming the option."""
    with pytest.raises(SystemExit) as exited:
        main(["replay", "--agent", "tests.replay.agents:same", "--from", str(golden),
              "--history-limit", "-1"])
    assert exited.value.code == 2
    assert "--history-limit: must be at least 0" in capsys.readouterr().err


def test_registry_options_that_cannot_work_exit_2_with_a_reason(
    golden: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The registry's agents need its database; --agent-version chooses registry versions
    only; a live model replays against one agent; a version is recorded, live or a number."""
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert main(["replay", "--agent", "registry", "--from", str(golden)]) == 2
    assert "DATABASE_URL is not set" in capsys.readouterr().err
    assert main(["replay", "--agent", "tests.replay.agents:same", "--from", str(golden),
                 "--agent-version", "2"]) == 2
    assert "--agent-version chooses registry versions" in capsys.readouterr().err
    assert main(["replay", "--agent", "registry", "--model", "live"]) == 2
    assert "--model live replays against one agent" in capsys.readouterr().err
    for bad in ("0", "latest", "-1"):
        with pytest.raises(SystemExit) as exited:
            main(["replay", "--agent", "registry", "--agent-version", bad])
        assert exited.value.code == 2
        assert "recorded, live or a version number" in capsys.readouterr().err
