"""docs/replay.md's walk-through as a newcomer runs it: record the demo's scripted chat with
``turnflow dev`` into a database (and a second chat after it, into the same database), change
the agent, replay with ``--expect-changes messages``.

Both edits of the walk-through at once (a reworded greeting at turn 1, the brake note removed
at turn 3): the accepted wording change must not hide the behaviour change after it, from the
database and from exported golden files alike."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from consumer.cli import main
from tests.consumer.dev_process import REPO, run_dev

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

GREETING = '"Hi! I\'m Ana from Spoke & Chain bike repair."'
NOTE_THEN = '''"then": "brakes_note",'''


def _my_demo(folder: Path, *, greeting: bool, brakes: bool) -> str:
    """``my_demo.py`` as the walk-through edits it; returns the module name."""
    source = (REPO / "examples" / "demo_agent.py").read_text(encoding="utf-8")
    if greeting:
        assert GREETING in source
        source = source.replace(GREETING, '"Hello! Ana here, at Spoke & Chain."')
    if brakes:
        assert NOTE_THEN in source
        source = source.replace(NOTE_THEN, '"then": {"step": "summary", "clear": ["confirmed"]},')
    name = f"my_demo_{int(greeting)}{int(brakes)}"
    (folder / f"{name}.py").write_text(source, encoding="utf-8")
    return name


@dataclass
class _Ran:
    returncode: int
    stdout: str
    stderr: str


def test_an_accepted_wording_change_does_not_hide_a_behaviour_change(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The replay commands run in this process (as ``turnflow ...`` from the folder holding
    # my_demo.py), the chats as child processes.
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))

    def _turnflow(folder: Path, env: dict[str, str], *args: str) -> _Ran:
        with monkeypatch.context() as scoped:
            scoped.delenv("DATABASE_URL", raising=False)
            for name, value in env.items():
                scoped.setenv(name, value)
            capsys.readouterr()
            code = main(list(args))
            out = capsys.readouterr()
        return _Ran(code, out.out, out.err)

    session = f"walk-{uuid.uuid4().hex[:6]}"
    env = {"DATABASE_URL": database_url}
    recorded = run_dev("--script", str(REPO / "examples" / "demo.chat"), "--session", session,
                       "--data-dir", str(tmp_path / "dev"), env=env)
    assert recorded.code == 0, recorded.stdout + recorded.stderr
    # A second recording into the same database (its own topics, named for the run), with a
    # burst sent from the chat: its three messages go out together and one turn answers them.
    burst = tmp_path / "burst.chat"
    burst.write_text("/burst hi | my name is Sam | I need the brakes fixed on saturday\nyes\n")
    second = run_dev("--script", str(burst), "--session", f"{session}-b", "--data-dir",
                     str(tmp_path / "dev"), env=env)
    assert second.code == 0, second.stdout + second.stderr
    lines = second.stdout.splitlines()
    answered = lines[lines.index("you> I need the brakes fixed on saturday") + 1:
                     lines.index("you> yes")]
    footers = [line for line in answered if line.startswith("  [llm_calls=")]
    timers = [line for line in answered if line.startswith("  [timer fired")]
    assert len(footers) == 1 + len(timers), second.stdout  # the burst: one turn
    assert "ana> Hi Sam! Thank you, got it." in answered, second.stdout

    replay = ("replay", "--session", session, "--expect-changes", "messages")
    wording = _my_demo(tmp_path, greeting=True, brakes=False)
    only_wording = _turnflow(tmp_path, env, *replay, "--agent", f"{wording}:agent")
    assert only_wording.returncode == 0, only_wording.stdout + only_wording.stderr
    assert f"expected change: {session} departs at turn 1 of 7" in only_wording.stdout

    both = _my_demo(tmp_path, greeting=True, brakes=True)
    for source in ((), ("--from", str(tmp_path / "golden"))):
        if source:
            exported = _turnflow(tmp_path, env, "replay", "export", "--out",
                                 str(tmp_path / "golden"), "--session", session)
            assert exported.returncode == 0, exported.stderr
            assert (tmp_path / "golden" / f"{session}.json").is_file()
        run = _turnflow(tmp_path, env if not source else {}, *replay, *source,
                        "--agent", f"{both}:agent")
        said = run.stdout
        assert run.returncode == 1, said + run.stderr
        assert f"expected change: {session} departs at turn 1 of 7" in said
        assert f"CHANGED: {session} departs at turn 3 of 7" in said
        assert "    - verbatim: Brake jobs take about two hours; please bring the bike in the " \
            "morning." in said
        assert "(1 unexpected)" in said
