"""`helm lint` by Helm's own Go code: templates render and values pass the schema in Helm."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helm.helm_chart import CHART_DIR
from tests.helm.helm_lint import lint_chart
from tests.helm.values_cases import CASES


def _chart_copy(tmp_path: Path) -> Path:
    # The damage cases add a template, so they lint a copy rather than the chart itself.
    chart = tmp_path / "turnflow"
    shutil.copytree(CHART_DIR, chart)
    return chart


def test_chart_as_shipped_lints_clean() -> None:
    """helm lint of the chart directory itself reports no error and no warning."""
    result = lint_chart(CHART_DIR)
    assert [m for m in result.messages if m[0] in ("ERROR", "WARNING")] == []


@pytest.mark.parametrize("overrides", CASES.values(), ids=CASES.keys())
def test_chart_lints_clean_with_each_value_set(overrides: dict[str, Any]) -> None:
    """Helm renders every template without error with defaults, all options on and all off."""
    result = lint_chart(CHART_DIR, overrides)
    assert result.errors == [], result.messages


def _break_yaml(chart: Path) -> None:
    (chart / "templates" / "broken.yaml").write_text("data: key: value\n")


def _break_template(chart: Path) -> None:
    (chart / "templates" / "broken.yaml").write_text("a: {{ .Values.missing.field }}\n")


@pytest.mark.parametrize(
    ("overrides", "damage", "path"),
    [
        ({"consumer": {"maxInFlight": 0}}, None, "values.yaml"),
        ({"secrets": {"databaseUrl": "postgresql://u:p@db/x"}}, None, "values.yaml"),
        ({}, _break_yaml, "templates/broken.yaml"),
        ({}, _break_template, "templates/"),
    ],
    ids=["schema: zero in-flight", "schema: plain secret", "invalid YAML", "nil field"],
)
def test_helm_lint_reports_errors(
    tmp_path: Path,
    overrides: dict[str, Any],
    damage: Callable[[Path], None] | None,
    path: str,
) -> None:
    """Helm's lint fails values the schema refuses and templates that do not render or parse,
    so a clean lint above means something."""
    chart = _chart_copy(tmp_path)
    if damage:
        damage(chart)
    assert path in lint_chart(chart, overrides).errors
