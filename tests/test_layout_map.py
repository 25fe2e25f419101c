"""The README's layout section names every package of the tree, and the services import one way."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVICES = {"scheduler", "relay", "devchat", "inspect", "cli"}
# The consume service's own modules: a service other than the composing ones must not import them.
CONSUME_SERVICE = {"consumer.service", "consumer.pipeline", "consumer.partitions"}
COMPOSERS = {"cli", "devchat", "inspect"}  # they run services in their process


def _layout_section() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("## Layout", 1)[1].split("```", 2)[1]


def _packages(parent: Path) -> set[str]:
    return {p.name for p in parent.iterdir() if (p / "__init__.py").is_file()}


def test_readme_layout_names_every_package() -> None:
    """Every package under consumer/ and engine/, and every top-level package, is in the README's
    layout section, and the section names no folder that does not exist."""
    section = _layout_section()
    named = set(re.findall(r"^\s*([a-z_]+)/", section, flags=re.MULTILINE))
    tree = _packages(ROOT) | _packages(ROOT / "consumer") | _packages(ROOT / "engine")
    tree -= {"tests"}
    assert tree - named == set(), f"packages missing from the README's layout: {tree - named}"
    folders = {p.name for p in ROOT.iterdir() if p.is_dir()}
    folders |= {p.name for p in (ROOT / "consumer").iterdir() if p.is_dir()}
    folders |= {p.name for p in (ROOT / "engine").iterdir() if p.is_dir()}
    assert named - folders == set(), f"the README names folders that do not exist: {named - folders}"


def _imports(package: Path) -> set[str]:
    found: set[str] = set()
    for source in package.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
                found |= {f"{node.module}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
    return found


def test_services_import_no_other_service() -> None:
    """Only the command line, the dev chat and the inspector's console (which run services in their
    process) import another service; the scheduler, the relay and hosting import none."""
    for name in _packages(ROOT / "consumer"):
        if name in COMPOSERS:
            continue
        imported = _imports(ROOT / "consumer" / name)
        others = {
            m
            for m in imported
            for s in SERVICES - {name}
            if m == f"consumer.{s}" or m.startswith(f"consumer.{s}.")
        }
        assert others == set(), f"consumer/{name} imports another service: {sorted(others)}"
        assert imported & CONSUME_SERVICE == set(), (
            f"consumer/{name} imports the consume service: {sorted(imported & CONSUME_SERVICE)}"
        )
