"""The chart as Helm itself loads, coalesces and renders it, through ``helm-python-sdk``.

That PyPI wheel (in the ``test`` extra) carries Helm v4's own Go library and calls it through
ctypes: no helm binary, no cluster and no network. Rendering with Helm's engine rather than a
re-implementation keeps the tests exact where a chart author would not look (whitespace
trimming, Sprig functions, how values coalesce and how the schema is checked).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import helm_python as helm
import yaml

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
    """The chart's default values, as Helm loads them from values.yaml."""
    with helm.Chart.load(CHART_DIR) as chart:
        return chart.values


def merge_values(overrides: dict[str, Any]) -> dict[str, Any]:
    """The values a release with these overrides gets: Helm's own coalescing of them into the
    chart's defaults (maps merge key by key, a None override deletes the key)."""
    with helm.Chart.load(CHART_DIR) as chart:
        return chart.merge_values(overrides)


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
) -> RenderedChart:
    """Render every template as ``helm template`` does; Helm refuses values its schema refuses
    (``helm_python.HelmValuesError``) and templates that fail (``HelmRenderError``)."""
    with helm.Chart.load(CHART_DIR) as chart:
        rendered = chart.render(overrides or {}, name=release, namespace=namespace, is_install=True)
        templates = PurePosixPath(chart.name, "templates")
    # Helm keys each output by its path in the chart, e.g. "turnflow/templates/pdb.yaml".
    by_file = {
        PurePosixPath(path).relative_to(templates).as_posix(): text
        for path, text in rendered.items()
    }
    files = {name: text for name, text in sorted(by_file.items()) if name.endswith(".yaml")}
    return RenderedChart(files=files, notes=by_file["NOTES.txt"])
