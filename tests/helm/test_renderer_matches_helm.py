"""The tests' renderer produces exactly what Helm's own engine renders, file by file.

Helm's library offers lint but no client-only render, and lint does not return the rendered
text. So each template's output from ``gotemplate`` is written into a copy of the chart, and a
probe template per file compares Helm's rendering of that file (``include`` of its path) with
the stored text, emitting invalid YAML when they differ: Helm's lint then reports that probe's
path. A clean lint means Helm and the renderer agree byte for byte.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helm.chart_render import CHART_DIR, chart_values, merge_values, render_chart
from tests.helm.helm_lint import lint_chart
from tests.helm.values_cases import CASES

# What helm lint renders with (its library leaves the namespace empty).
_RELEASE, _NAMESPACE = "test-release", ""

_PROBE = """\
{{- if ne (include (print $.Template.BasePath "/%(name)s") .) (.Files.Get "expected/%(name)s") }}
renderer-differs-from-helm: : %(name)s
{{- end }}
"""


def _probed_chart(tmp_path: Path, overrides: dict[str, Any], *, tamper: str = "") -> Path:
    chart = tmp_path / "turnflow"
    shutil.copytree(CHART_DIR, chart)
    (chart / "values.yaml").write_text(yaml.safe_dump(merge_values(chart_values(), overrides)))
    rendered = render_chart(overrides, release=_RELEASE, namespace=_NAMESPACE, chart_dir=chart)
    outputs = {**rendered.files, "NOTES.txt": rendered.notes}
    (chart / "expected").mkdir()
    for name, text in outputs.items():
        (chart / "expected" / name).write_text(text + ("\n" if name == tamper else ""))
        probe = chart / "templates" / f"zz-probe-{name.replace('.', '-')}.yaml"
        probe.write_text(_PROBE % {"name": name})
    return chart


@pytest.mark.parametrize("overrides", CASES.values(), ids=CASES.keys())
def test_every_file_renders_as_helm_renders_it(
    helm_lib: Path, tmp_path: Path, overrides: dict[str, Any]
) -> None:
    """For defaults, all options on and all off, each template and NOTES.txt render to the
    same text in the renderer and in Helm."""
    result = lint_chart(_probed_chart(tmp_path, overrides), helm_lib)
    assert result.errors == []


def test_a_difference_is_reported(helm_lib: Path, tmp_path: Path) -> None:
    """One extra newline in the stored rendering of one file makes that file's probe fail."""
    chart = _probed_chart(tmp_path, {}, tamper="pdb.yaml")
    assert lint_chart(chart, helm_lib).errors == ["templates/zz-probe-pdb-yaml.yaml"]
