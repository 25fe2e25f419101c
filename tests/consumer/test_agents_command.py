"""``turnflow agents``: put checks a definition against the packs before storing it, versions
per change, activate and roll back, diff, workspaces and credits; failures are one line."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from consumer import cli

DEMO = json.loads((Path(__file__).resolve().parents[2] / "examples/agents/demo.json").read_text())


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, database_url: str) -> None:
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("PACKS", "examples.demo_pack:pack")


def _write(tmp_path: Path, document: Any) -> str:
    path = tmp_path / f"{uuid.uuid4().hex}.json"
    path.write_text(json.dumps(document))
    return str(path)


def _out(capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_put_activate_diff_and_roll_back(
    env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent_id = f"shop {uuid.uuid4().hex[:6]} "  # a trailing space: printed quoted
    first = copy.deepcopy(DEMO) | {"agent_id": agent_id, "workspace": "ws-cli"}
    assert cli.main(["agents", "put", _write(tmp_path, first), "--activate"]) == 0
    assert "stored as version 1" in _out(capsys)[0]
    assert cli.main(["agents", "put", _write(tmp_path, first)]) == 0
    assert "unchanged: already version 1" in _out(capsys)[0]
    second = first | {"name": "Bia"}
    assert cli.main(["agents", "put", _write(tmp_path, second)]) == 0
    assert "stored as version 2 (workspace ws-cli, live 1)" in _out(capsys)[0]
    assert cli.main(["agents", "diff", agent_id, "1", "2"]) == 0
    diff = _out(capsys)[0]
    assert '-  "name": "Ana",' in diff and '+  "name": "Bia",' in diff
    assert cli.main(["agents", "activate", agent_id, "2"]) == 0
    assert cli.main(["agents", "show", agent_id]) == 0
    assert json.loads(_out(capsys)[0].split("on another version\n", 1)[1])["name"] == "Bia"
    assert cli.main(["agents", "activate", agent_id, "1"]) == 0  # roll back
    assert cli.main(["agents", "list", "--workspace", "ws-cli"]) == 0
    assert f'ws-cli\t{json.dumps(agent_id)}\t1\t2\t2' in _out(capsys)[0]


def test_a_bad_definition_is_refused_with_where_and_nothing_is_stored(
    env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent_id = f"bad-{uuid.uuid4().hex[:6]}"
    document = copy.deepcopy(DEMO) | {"agent_id": agent_id, "packs": []}
    assert cli.main(["agents", "put", _write(tmp_path, document)]) == 2
    assert _out(capsys)[1].strip() == (
        "turnflow: flow 'booking', step 'book': unknown action 'book_repair'"
    )
    assert cli.main(["agents", "put", _write(tmp_path, document), "--packs", "nope:pack"]) == 2
    assert "cannot import 'nope'" in _out(capsys)[1]
    assert cli.main(["agents", "show", agent_id]) == 2
    assert _out(capsys)[1].strip() == f"turnflow: agent '{agent_id}' has no live version"
    moved = copy.deepcopy(DEMO) | {"agent_id": agent_id, "workspace": "one"}
    assert cli.main(["agents", "put", _write(tmp_path, moved)]) == 0
    assert cli.main(["agents", "put", _write(tmp_path, moved | {"workspace": "two"})]) == 2
    assert "belongs to workspace 'one'" in _out(capsys)[1]


def test_workspace_plan_and_credits(env: None, capsys: pytest.CaptureFixture[str]) -> None:
    name = f"ws-{uuid.uuid4().hex[:6]}"
    assert cli.main(["agents", "workspace", name, "--web-searches-per-day", "7"]) == 2
    assert _out(capsys)[1].count("\n") == 1  # one line: an unknown workspace, no --create
    assert cli.main(["agents", "workspace", name, "--create", "--web-searches-per-day", "7"]) == 0
    assert f"workspace {name}: plan default, agents on, web searches per day 7" in _out(capsys)[0]
    assert cli.main(["agents", "workspace", name, "--agents", "off"]) == 0
    assert "agents off, web searches per day 7" in _out(capsys)[0]
    assert cli.main(["agents", "credits", "--workspace", name]) == 0
    assert _out(capsys)[0] == "day\tworkspace\tcredits\tturns\n"


def test_consume_from_the_registry_checks_its_packs_first(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """AGENT_REGISTRY needs no AGENT; a pack that does not import exits 2 on one line before
    any server is reached."""
    monkeypatch.delenv("AGENT", raising=False)
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("AGENT_REGISTRY", "true")
    monkeypatch.setenv("PACKS", "examples.demo_pack:pack,no_such_pack_xyz:pack")
    assert cli.main(["consume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot import 'no_such_pack_xyz'" in err[0]
    monkeypatch.setenv("PACKS", "examples.demo_agent:BOOKINGS")
    assert cli.main(["consume"]) == 2
    assert "is not an engine.packs.Pack" in capsys.readouterr().err
