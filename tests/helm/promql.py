"""Metric names referenced by a PromQL expression or a Grafana templating query.

Not a PromQL parser: it removes what cannot hold a metric name (string literals, label matchers,
range selectors, grouping label lists, Grafana variables, numbers) and keeps every remaining
identifier that is neither a function call nor a keyword. That is exact for the expression
shapes the dashboards use, and errs towards reporting too many names, never too few.
"""

from __future__ import annotations

import re

__all__ = ["dashboard_queries", "metric_names"]

_KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "inf",
        "nan",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "atan2",
    }
)
_STRIPS = (
    re.compile(r'"(?:[^"\\]|\\.)*"'),
    re.compile(r"'(?:[^'\\]|\\.)*'"),
    re.compile(r"\{[^{}]*\}"),
    re.compile(r"\[[^\]]*\]"),
    re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"),
    re.compile(r"\$\{[^}]*\}|\$\w+"),
    re.compile(r"(?<![\w:])\d+(?:\.\d+)?(?:e[+-]?\d+)?[smhdwy]?\b", re.I),
)
_IDENTIFIER = re.compile(r"(?<![\w:.])[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?P<args>.*)\)\s*$", re.S)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    text = expr
    for pattern in _STRIPS:
        text = pattern.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        if match.group(0) not in _KEYWORDS:
            names.add(match.group(0))
    return names


def _templating_names(query: str) -> set[str]:
    match = _LABEL_VALUES.match(query)
    if not match:
        return metric_names(query)
    args = match.group("args")
    if "," not in args:
        return set()  # label_values(label): no metric
    return metric_names(args.rsplit(",", 1)[0])


def dashboard_queries(dashboard: dict[str, object]) -> list[tuple[str, set[str]]]:
    """(where, metric names) for every panel target and templating query of a dashboard."""
    found: list[tuple[str, set[str]]] = []

    def panels(items: object) -> None:
        for panel in items if isinstance(items, list) else []:
            for target in panel.get("targets", []):
                where = f"panel {panel.get('title')!r} target {target.get('refId')}"
                found.append((where, metric_names(target["expr"])))
            panels(panel.get("panels", []))

    panels(dashboard.get("panels", []))
    templating = dashboard.get("templating", {})
    for variable in templating.get("list", []) if isinstance(templating, dict) else []:
        if variable.get("type") == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            found.append((f"variable {variable['name']!r}", _templating_names(text)))
    return found
