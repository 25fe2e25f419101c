"""``turnflow prune --help`` says everything the command deletes."""

from __future__ import annotations

import pytest

from consumer.cli import main


def test_prune_help_names_everything_it_deletes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["prune", "--help"])
    assert exited.value.code == 0
    described = capsys.readouterr().out.split("options:")[0]
    for what in ("model recordings", "outbox rows", "dead letters"):
        assert what in described, described


def test_the_command_list_says_it_too(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("prune"))
    assert "outbox" in line and "dead letters" in line
