"""``make run`` installs what running needs; the test tools come with ``make test``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _dry_run(tmp_path: Path, target: str) -> list[str]:
    """The commands ``make TARGET`` would run in a fresh clone (no .venv yet)."""
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    # Run as a top-level make even under `make test`: a nested make prints "Entering/Leaving
    # directory" lines among the commands.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    done = subprocess.run([make, "--no-print-directory", "-n", target], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_make_run_installs_only_the_runtime(tmp_path: Path) -> None:
    """A fresh ``make run`` installs the project without the test extra, then starts the chat."""
    commands = _dry_run(tmp_path, "run")
    installs = [c for c in commands if "pip install" in c and "--upgrade pip" not in c]
    assert installs == [".venv/bin/pip install -q -e ."]
    assert commands[-1] == ".venv/bin/turnflow dev "


def test_make_test_adds_the_test_extra(tmp_path: Path) -> None:
    """``make test`` installs the runtime first, then the test extra, then lints and tests."""
    commands = _dry_run(tmp_path, "test")
    installs = [c for c in commands if "pip install" in c and "--upgrade pip" not in c]
    assert installs[:2] == [".venv/bin/pip install -q -e .",
                            ".venv/bin/pip install -q -e '.[test]'"]
    assert any("pytest" in c for c in commands)
