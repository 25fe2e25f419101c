"""The package's metadata as a current setuptools wants it: an SPDX licence expression and the
licence file, so installing prints no deprecation warnings, and an image build has the file."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_licence_is_an_spdx_expression_with_its_file() -> None:
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    assert project["license"] == "Apache-2.0"  # a table is deprecated by setuptools 77+
    files = project["license-files"]
    assert files and all((ROOT / name).is_file() for name in files)
    assert "Apache License" in (ROOT / "LICENSE").read_text(encoding="utf-8")[:200]
    classifiers = project.get("classifiers") or []
    assert not [c for c in classifiers if c.startswith("License ::")]  # refused beside SPDX


def test_the_build_asks_for_a_setuptools_that_reads_it() -> None:
    requires = _pyproject()["build-system"]["requires"]  # type: ignore[index]
    pinned = next(r for r in requires if r.startswith("setuptools"))
    assert int(re.search(r">=(\d+)", pinned).group(1)) >= 77  # type: ignore[union-attr]


def test_the_image_build_copies_the_licence_file() -> None:
    """``pip install .`` in the image reads ``license-files``: the file must be there."""
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    copied = [line for line in dockerfile.splitlines() if line.startswith("COPY pyproject.toml")]
    assert copied and "LICENSE" in copied[0].split()
