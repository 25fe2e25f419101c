"""The registry's input: a NUL or a lone surrogate in an id or a text field is refused in one
line with exit 2 (never a database traceback, never stored changed), anything else is stored and
shown exactly, an unknown workspace is not created by a typo, and look-alike ids are marked."""

from __future__ import annotations

import copy
import json
import unicodedata
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consumer import cli
from store.errors import RegistryInputError
from store.registry_input import check_document, check_id, skeleton

DEMO = json.loads((Path(__file__).resolve().parents[2] / "examples/agents/demo.json").read_text())


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, database_url: str) -> None:
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("PACKS", "examples.demo_pack:pack")


def _write(tmp_path: Path, document: Any) -> str:
    path = tmp_path / f"{uuid.uuid4().hex}.json"
    path.write_text(json.dumps(document))  # ensure_ascii: NUL and surrogates as \\u escapes
    return str(path)


@pytest.mark.parametrize("field", ["agent_id", "workspace", "name", "persona"])
@pytest.mark.parametrize("bad", ["a\x00b", "a\ud800b", "\udfff"])
def test_nul_and_lone_surrogates_are_refused_in_one_line(
    env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, bad: str
) -> None:
    """A NUL or lone surrogate in an id or a text field: exit 2, one line naming the field,
    and nothing stored."""
    agent_id = f"nul-{uuid.uuid4().hex[:6]}"
    document = copy.deepcopy(DEMO) | {"agent_id": agent_id, "workspace": "ws-nul"}
    document[field] = bad
    assert cli.main(["agents", "put", _write(tmp_path, document)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err and "Traceback" not in err
    assert cli.main(["agents", "show", agent_id]) == 2
    capsys.readouterr()


def test_nul_in_a_command_id_is_refused_in_one_line(
    env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """``show``, ``activate`` and ``workspace`` with a NUL in the id: one line, exit 2."""
    for argv in (["agents", "show", "a\x00"], ["agents", "activate", "a\x00", "1"],
                 ["agents", "workspace", "w\x00", "--create"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "NUL" in err


def test_text_is_stored_and_shown_exactly(
    env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unicode that PostgreSQL can hold (emoji, combining marks, RTL) comes back unchanged."""
    agent_id = f"exact-{uuid.uuid4().hex[:6]}"
    persona = "Ana 🚲 e\u0301 \u202e אבג \ufeff"
    document = copy.deepcopy(DEMO) | {"agent_id": agent_id, "workspace": "ws-x",
                                      "persona": persona}
    assert cli.main(["agents", "put", _write(tmp_path, document)]) == 0
    capsys.readouterr()
    assert cli.main(["agents", "show", agent_id, "--version", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["persona"] == persona


def test_an_unknown_workspace_needs_create_and_look_alikes_are_marked(
    env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo in ``agents workspace`` creates nothing; ids differing by a Cyrillic o (U+043E) or a
    decomposed é are marked as looking like each other in ``agents list``."""
    tag = uuid.uuid4().hex[:6]
    workspace = f"look-{tag}"
    ids = [f"shop-{tag}", f"sh\u043ep-{tag}", f"caf\u00e9-{tag}", f"cafe\u0301-{tag}",
           f"plain-{tag}"]
    for agent_id in ids:
        document = copy.deepcopy(DEMO) | {"agent_id": agent_id, "workspace": workspace}
        assert cli.main(["agents", "put", _write(tmp_path, document)]) == 0
    capsys.readouterr()
    assert cli.main(["agents", "workspace", workspace + "e", "--agents", "off"]) == 2
    assert "--create" in capsys.readouterr().err
    assert cli.main(["agents", "workspace", workspace, "--agents", "off"]) == 0
    capsys.readouterr()
    assert cli.main(["agents", "list", "--workspace", workspace + "e"]) == 0
    assert capsys.readouterr().out.count("\n") == 1  # the typo made no workspace
    assert cli.main(["agents", "list", "--workspace", workspace]) == 0
    lines = {line.split("\t")[1]: line.split("\t")[-1]
             for line in capsys.readouterr().out.splitlines()[1:]}
    assert lines[ids[0]] == json.dumps(ids[1]) and lines[ids[1]] == json.dumps(ids[0])
    assert lines[ids[2]] == json.dumps(ids[3]) and lines[ids[3]] == json.dumps(ids[2])
    assert lines[ids[4]] == "-"


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(value=st.text(alphabet=st.characters(), max_size=30))
def test_any_unicode_id_is_refused_with_a_reason_or_kept_exactly(value: str) -> None:
    """Arbitrary unicode (surrogates and NUL included): ``check_id`` returns it unchanged or
    refuses naming the field; ``skeleton`` never raises and gives canonically equal ids (a
    composed and a decomposed é) one skeleton."""
    try:
        assert check_id(value, "agent_id") == value
    except RegistryInputError as exc:
        assert "agent_id" in str(exc)
        assert "\x00" in value or any("\ud800" <= c <= "\udfff" for c in value)
    assert skeleton(unicodedata.normalize("NFD", value)) == skeleton(value)


@given(document=st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(st.characters())),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(st.characters(), max_size=5), inner,
                                            max_size=4)),
    max_leaves=20,
))
def test_any_document_is_refused_with_a_path_or_accepted(document: Any) -> None:
    """Any JSON-shaped document: accepted only when no key or text holds NUL or a surrogate,
    otherwise refused with the path where it was found."""
    def bad(value: Any) -> bool:
        if isinstance(value, str):
            return "\x00" in value or any("\ud800" <= c <= "\udfff" for c in value)
        if isinstance(value, dict):
            return any(bad(k) or bad(v) for k, v in value.items())
        if isinstance(value, list):
            return any(bad(v) for v in value)
        return False

    try:
        check_document(document)
    except RegistryInputError as exc:
        assert bad(document) and "document" in str(exc)
    else:
        assert not bad(document)
