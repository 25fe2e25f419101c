"""The Dockerfile the chart's image comes from: multi-stage, non-root, built from the repo."""

from __future__ import annotations

import fnmatch
import re
import subprocess
from pathlib import Path

import pytest

from tests.helm.helm_chart import chart_values

ROOT = Path(__file__).resolve().parents[2]


def _instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for instruction in _instructions():
        if instruction[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def test_image_is_multi_stage_and_runtime_copies_from_build() -> None:
    """The runtime stage starts fresh and takes the installed virtualenv from the build stage."""
    stages = _stages()
    assert len(stages) >= 2
    build_name = stages[0][0][1].split()[-1]
    assert any(op == "COPY" and f"--from={build_name}" in args for op, args in stages[-1])
    assert not any(op == "RUN" and "pip install" in args for op, args in stages[-1])


def test_build_installs_the_project_from_the_repository_files() -> None:
    """The build stage pip-installs the copied project itself (not editable, not from an index
    by name), and every path it copies exists and is not excluded from the build context."""
    build = _stages()[0]
    assert any(op == "RUN" and re.search(r"pip install [^|&]*\.(\s|$)", args) for op, args in build)
    assert not any("install -e" in args for _, args in build)
    ignored = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for stage in _stages():
        for op, args in stage:
            if op != "COPY" or "--from=" in args:
                continue
            for source in args.split()[:-1]:
                assert (ROOT / source).exists(), source
                assert not any(fnmatch.fnmatch(source, pattern) for pattern in ignored), source


def test_runtime_user_is_the_non_root_uid_the_chart_expects() -> None:
    """The last USER is a numeric non-root uid equal to the chart's runAsUser."""
    users = [args for op, args in _stages()[-1] if op == "USER"]
    assert users
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    assert int(uid) == chart_values()["podSecurityContext"]["runAsUser"]


def test_entrypoint_is_the_console_script_and_the_port_matches_the_chart() -> None:
    """The image runs the `turnflow` console script and exposes the chart's metrics port."""
    runtime = dict(_stages()[-1])
    assert runtime["ENTRYPOINT"] == '["turnflow"]'
    assert 'turnflow = "consumer.cli:main"' in (ROOT / "pyproject.toml").read_text()
    assert runtime["EXPOSE"] == str(chart_values()["metrics"]["port"])


def test_default_agent_ships_in_the_image() -> None:
    """The chart's default AGENT names a module the image copies onto its PYTHONPATH."""
    module, attribute = chart_values()["agent"].split(":")
    path = ROOT / (module.replace(".", "/") + ".py")
    assert path.exists()
    assert re.search(rf"^{attribute}\s*[:=]", path.read_text(), re.M)
    assert any(
        op == "COPY" and args.split()[0] == module.split(".")[0] for op, args in _stages()[-1]
    )


def test_hadolint_finds_nothing(hadolint: str) -> None:
    """hadolint reports no warning on the Dockerfile."""
    done = subprocess.run(
        [hadolint, "--no-color", str(ROOT / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("line", ["FROM python", "USER root"])
def test_hadolint_flags_a_bad_dockerfile(hadolint: str, tmp_path: Path, line: str) -> None:
    """hadolint fails an untagged base image and a root user, so its silence above counts."""
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f'FROM python:3.11-slim\n{line}\nCMD ["python"]\n')
    done = subprocess.run(
        [hadolint, "--no-color", str(dockerfile)], capture_output=True, text=True, check=False
    )
    assert done.returncode != 0
