"""``helm lint`` by Helm's own Go code, through the PyPI wheel ``helm-python-sdk``.

Helm's lint action renders every template with the chart's values and any overrides, checks
them against ``values.schema.json`` and parses the output as YAML, as ``helm lint`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm

__all__ = ["LintResult", "lint_chart"]

_SEVERITY = {0: "UNKNOWN", 1: "INFO", 2: "WARNING", 3: "ERROR"}


@dataclass(frozen=True)
class LintResult:
    """What helm lint said: one (severity, path, detail) per message."""

    messages: list[tuple[str, str, str]]

    @property
    def errors(self) -> list[str]:
        """Paths that helm lint reported at ERROR severity."""
        return [path for severity, path, _ in self.messages if severity == "ERROR"]


def lint_chart(chart_dir: Path, overrides: dict[str, Any] | None = None) -> LintResult:
    """Run Helm's lint action on a chart directory, with overrides coalesced into its values."""
    report = helm.lint(chart_dir, overrides)
    messages = [
        (_SEVERITY.get(m["severity"], str(m["severity"])), m["path"], m.get("error", ""))
        for m in report.get("messages") or []
    ]
    return LintResult(messages=messages)
