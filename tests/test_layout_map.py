"""The README's layout section names every package of the tree, and the services import one way."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVICES = {"turns", "scheduler", "relay", "devchat", "inspect", "cli"}
COMPOSERS = {"cli", "devchat", "inspect"}  # they run services in their process
# Each consumer runs an outbox relay beside its turn loop (the relay's own process is the other).
RUNS_INSIDE = {"turns": {"relay"}}


def _layout_section() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("## Layout", 1)[1].split("```", 2)[1]


def _packages(parent: Path) -> set[str]:
    return {p.name for p in parent.iterdir() if (p / "__init__.py").is_file()}


def test_readme_layout_names_every_package() -> None:
    """Every package under consumer/, engine/ and bench/, and every top-level package, is in the
    README's layout section, and the section names no folder that does not exist."""
    section = _layout_section()
    named = set(re.findall(r"^\s*([a-z_]+)/", section, flags=re.MULTILINE))
    parents = ("consumer", "engine", "bench")
    tree = _packages(ROOT).union(*(_packages(ROOT / parent) for parent in parents))
    tree -= {"tests"}
    assert tree - named == set(), f"packages missing from the README's layout: {tree - named}"
    folders = {p.name for p in ROOT.iterdir() if p.is_dir()}
    for parent in parents:
        folders |= {p.name for p in (ROOT / parent).iterdir() if p.is_dir()}
    missing = named - folders
    assert missing == set(), f"the README names folders that do not exist: {missing}"


def _imports(package: Path) -> set[str]:
    found: set[str] = set()
    for source in package.rglob("*.py"):
        found |= _imports_of(source)
    return found


def _imports_of(source: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


PRODUCT = ("engine", "store", "consumer", "replay", "migrations")
BENCH_ENTRY = ROOT / "consumer" / "cli" / "bench.py"  # `turnflow bench`, by name at run time


def test_the_product_imports_no_benchmark() -> None:
    """The benchmarks are not part of the installed package: no module of it imports ``bench``
    (``turnflow bench`` names its module as a string and imports it when run)."""
    for package in PRODUCT:
        for source in (ROOT / package).rglob("*.py"):
            imported = _imports_of(source)
            bad = {m for m in imported if m == "bench" or m.startswith("bench.")}
            assert bad == set(), f"{source.relative_to(ROOT)} imports {sorted(bad)}"
    assert "bench.e2e_bench" in BENCH_ENTRY.read_text()


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
            for s in SERVICES - {name} - RUNS_INSIDE.get(name, set())
            if m == f"consumer.{s}" or m.startswith(f"consumer.{s}.")
        }
        assert others == set(), f"consumer/{name} imports another service: {sorted(others)}"


def test_shared_modules_import_no_service() -> None:
    """The modules at the top of consumer/ are what every service shares: none imports a service's
    package (a shared module that did would drag that service into every other)."""
    services = SERVICES | {"hosting"}
    for source in (ROOT / "consumer").glob("*.py"):
        if source.name == "__init__.py":  # the public API names services lazily (PEP 562)
            continue
        imported = _imports_of(source)
        bad = {
            m
            for m in imported
            for s in services
            if m == f"consumer.{s}" or m.startswith(f"consumer.{s}.")
        }
        assert bad == set(), f"consumer/{source.name} imports a service: {sorted(bad)}"


def test_the_consume_service_lives_in_its_package() -> None:
    """The turn loop's parts are in consumer/turns/, not loose beside the shared modules."""
    loose = {"service", "pipeline", "decisions", "fairness", "watermarks", "parser", "backpressure"}
    assert {p.stem for p in (ROOT / "consumer").glob("*.py")} & loose == set()
    assert loose <= {p.stem for p in (ROOT / "consumer" / "turns").glob("*.py")}
    assert (ROOT / "tests" / "turns").is_dir()


ROOT_ENTRIES = {
    ".ci", ".dockerignore", ".gitignore", ".squawk.toml", "Dockerfile", "LICENSE", "Makefile",
    "README.md", "bench", "consumer", "docs", "engine", "examples", "helm", "migrations",
    "pyproject.toml", "replay", "store", "tests",
}


def test_the_root_holds_only_what_the_project_needs() -> None:
    """What a run leaves behind (a benchmark's data, a framework's log) goes under ``.turnflow/``
    or a folder of its own that git ignores, never into the checkout's root."""
    import subprocess

    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert {path.split("/", 1)[0] for path in tracked} - ROOT_ENTRIES == set()
