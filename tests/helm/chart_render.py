"""Render the chart as ``helm template`` would, with the Go-template subset in ``gotemplate``.

Values are the chart's ``values.yaml`` with overrides merged in the way helm coalesces them
(maps merge key by key, a ``None`` override deletes the key), then checked against
``values.schema.json`` before anything renders, as helm does.
"""

from __future__ import annotations

import copy
import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tests.helm.gotemplate import TemplateSet

__all__ = [
    "CHART_DIR",
    "RenderedChart",
    "chart_values",
    "merge_values",
    "render_chart",
    "schema",
]

CHART_DIR = Path(__file__).resolve().parents[2] / "helm" / "turnflow"


def schema() -> dict[str, Any]:
    """The chart's values schema."""
    loaded: dict[str, Any] = json.loads((CHART_DIR / "values.schema.json").read_text())
    return loaded


def chart_values() -> dict[str, Any]:
    """The chart's default values."""
    loaded: dict[str, Any] = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    return loaded


def merge_values(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Coalesce overrides into base like helm: maps merge, None deletes, the rest replaces."""
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_values(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


class _Files:
    """The ``.Files`` object: the chart's non-template files, by path relative to the chart."""

    def __init__(self, root: Path) -> None:
        self._root = root

    def Get(self, path: str) -> str:  # helm's method name, called from templates
        return (self._root / path).read_text()

    def Glob(self, pattern: str) -> dict[str, str]:
        found = {}
        for file in sorted(self._root.rglob("*")):
            relative = file.relative_to(self._root).as_posix()
            if file.is_file() and fnmatch.fnmatch(relative, pattern):
                found[relative] = file.read_text()
        return found


@dataclass
class RenderedChart:
    """Each template file's output, and its YAML documents (empty ones dropped)."""

    files: dict[str, str]
    notes: str

    def documents(self) -> list[dict[str, Any]]:
        """Every non-empty YAML document of every rendered manifest, in file order."""
        docs: list[dict[str, Any]] = []
        for text in self.files.values():
            docs.extend(d for d in yaml.safe_load_all(text) if d is not None)
        return docs

    def kinds(self) -> list[str]:
        """The kinds of all rendered objects."""
        return [d["kind"] for d in self.documents()]

    def one(self, kind: str, name_suffix: str = "") -> dict[str, Any]:
        """The single object of this kind whose name ends with name_suffix."""
        found = [
            d
            for d in self.documents()
            if d["kind"] == kind and d["metadata"]["name"].endswith(name_suffix)
        ]
        if len(found) != 1:
            raise LookupError(f"{len(found)} objects of kind {kind} ending {name_suffix!r}")
        return found[0]


def render_chart(
    overrides: dict[str, Any] | None = None,
    *,
    release: str = "prod",
    namespace: str = "chat",
    chart_dir: Path = CHART_DIR,
) -> RenderedChart:
    """Validate the merged values against the schema, then render every template."""
    values = merge_values(chart_values(), overrides or {})
    jsonschema.Draft7Validator(schema()).validate(values)
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    base_path = f"{chart['name']}/templates"
    dot = {
        "Values": values,
        "Release": {
            "Name": release,
            "Namespace": namespace,
            "Service": "Helm",
            "IsInstall": True,
            "IsUpgrade": False,
        },
        "Chart": {
            "Name": chart["name"],
            "Version": chart["version"],
            "AppVersion": chart.get("appVersion", ""),
        },
        "Files": _Files(chart_dir),
        "Template": {"BasePath": base_path},
    }
    templates = TemplateSet()
    sources = sorted((chart_dir / "templates").iterdir())
    for source in sources:
        templates.add(f"{base_path}/{source.name}", source.read_text())
    files = {
        source.name: templates.render(f"{base_path}/{source.name}", dot)
        for source in sources
        if source.suffix == ".yaml" and not source.name.startswith("_")
    }
    notes = templates.render(f"{base_path}/NOTES.txt", dot)
    return RenderedChart(files=files, notes=notes)
