"""The Grafana dashboards query only metrics the code exports, and show every one of them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from consumer import metrics
from tests.helm.helm_chart import CHART_DIR
from tests.helm.promql import dashboard_queries, metric_names

DASHBOARDS = sorted((CHART_DIR / "dashboards").glob("*.json"))

# Registered metrics deliberately left off every panel, each with its reason. Empty today: every
# family is on a panel. A new metric must get a panel or an entry here.
NOT_SHOWN: dict[str, str] = {
    "turnflow_database_timeline": "alerted on (TurnflowDatabaseFailover): a step, not a trend",
    "turnflow_positions_reread_records": "alerted on (TurnflowPositionsBehind): rare, "
    "after a failover",
    "turnflow_database_read_only": "alerted on (TurnflowDatabaseReadOnly): rare, during "
    "a switchover",
    "turnflow_database_pool_size": "alerted on (TurnflowDatabasePoolExhausted) beside in_use",
    "turnflow_database_pool_in_use": "alerted on (TurnflowDatabasePoolExhausted)",
}

# Labels Prometheus adds when it scrapes (Kubernetes service discovery), and the histogram bucket.
_TARGET_LABELS = {"namespace", "pod", "instance", "job", "service", "container"}

_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


def _load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def _family(sample: str) -> str:
    families = {m.name for m in metrics.REGISTRY.collect()}
    if sample in families:
        return sample
    for suffix in _SUFFIXES:
        if sample.endswith(suffix) and sample.removesuffix(suffix) in families:
            return sample.removesuffix(suffix)
    raise KeyError(sample)


def _family_labels() -> dict[str, set[str]]:
    labels: dict[str, set[str]] = {}
    for collector in vars(metrics).values():
        # prometheus_client keeps a metric's label names on the private _labelnames; no public
        # accessor exists for a metric that has no children yet.
        names = getattr(collector, "_labelnames", None)
        name = getattr(collector, "_name", None)
        if names is not None and name is not None:
            labels[name] = set(names)
    return labels


def _all_targets() -> list[tuple[str, str]]:
    found = []
    for path in DASHBOARDS:

        def walk(panels: list[dict[str, Any]], path: Path = path) -> None:
            for panel in panels:
                for target in panel.get("targets", []):
                    found.append((f"{path.name}: {panel['title']}", target["expr"]))
                walk(panel.get("panels", []))

        walk(_load(path)["panels"])
    return found


def test_there_are_dashboards() -> None:
    """The chart ships at least the turns and pipeline dashboards."""
    assert {p.name for p in DASHBOARDS} >= {"turnflow-turns.json", "turnflow-pipeline.json"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_query_reads_only_exported_metrics(path: Path) -> None:
    """Each panel expression and templating query names only samples in exported_names()."""
    exported = metrics.exported_names()
    queries = dashboard_queries(_load(path))
    assert queries
    for where, names in queries:
        assert names, f"{where}: no metric found"
        assert names <= exported, f"{where}: not exported: {sorted(names - exported)}"


def test_every_registered_metric_is_on_a_panel_or_listed_as_not_shown() -> None:
    """Each metric family in the registry appears in some panel, or in NOT_SHOWN with a reason."""
    shown = {
        _family(name)
        for path in DASHBOARDS
        for _, names in dashboard_queries(_load(path))
        for name in names
    }
    registered = {m.name for m in metrics.REGISTRY.collect()}
    assert registered - shown == set(NOT_SHOWN)
    assert all(NOT_SHOWN.values())


def test_grouping_labels_exist_on_the_metrics_grouped() -> None:
    """Every `by (...)` label is one the metric carries, a histogram's le, or a scrape label."""
    labels = _family_labels()
    for where, expr in _all_targets():
        families = {_family(n) for n in metric_names(expr)}
        available = set(_TARGET_LABELS)
        for family in families:
            available |= labels[family]
            if any(n.endswith("_bucket") for n in metric_names(expr)):
                available.add("le")
        for group in re.findall(r"\bby \(([^)]*)\)", expr):
            used = {label.strip() for label in group.split(",")}
            assert used <= available, f"{where}: {sorted(used - available)} in {expr}"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_is_well_formed_for_grafana(path: Path) -> None:
    """A unique uid, unique panel ids, panels inside the 24-column grid, a datasource variable
    every target uses, and one refId per target within a panel."""
    board = _load(path)
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 36
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        refs = [t["refId"] for t in panel.get("targets", [])]
        assert len(refs) == len(set(refs))
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}"


def test_dashboard_uids_are_unique() -> None:
    """No two dashboards share a uid (the sidecar would load only one)."""
    uids = [_load(p)["uid"] for p in DASHBOARDS]
    assert len(uids) == len(set(uids))


REQUIRED_PANELS = {
    "turns/s by input kind": r"turnflow_turns_total.*by \(kind\)|by \(kind\).*turnflow_turns_total",
    "llm calls per turn mean": r"llm_calls_per_turn_sum.*/.*turnflow_llm_calls_per_turn_count",
    "llm calls per turn p95": r"histogram_quantile\(0\.95, .*turnflow_llm_calls_per_turn_bucket",
    "llm calls by call kind": r"by \(call\).*turnflow_llm_calls_total",
    "outcomes top N": r"topk\(\$topn, .*turnflow_outcomes_total",
    "outcomes rate": r"by \(code\) \(rate\(turnflow_outcomes_total",
    "turn latency p50": r"histogram_quantile\(0\.5, .*turnflow_turn_duration_seconds_bucket",
    "turn latency p99": r"histogram_quantile\(0\.99, .*turnflow_turn_duration_seconds_bucket",
    "model-call latency": r"turnflow_model_call_duration_seconds_bucket",
    "version conflicts": r"turnflow_version_conflicts_total",
    "DLQ by reason": r"by \(reason\).*turnflow_dlq_total",
    "lag per partition": r"by \(topic, partition\).*turnflow_consumer_lag",
    "outbox backlog": r"turnflow_outbox_backlog",
    "timers pending": r"turnflow_timers_pending",
    "timer fire delay": r"turnflow_timer_fire_delay_seconds_bucket",
    "turn-level outcomes": r"by \(outcome\).*turnflow_turn_outcomes_total",
}


@pytest.mark.parametrize("pattern", REQUIRED_PANELS.values(), ids=REQUIRED_PANELS.keys())
def test_operators_panel_exists(pattern: str) -> None:
    """Each view operators asked for has a query of that shape on some dashboard."""
    assert any(re.search(pattern, expr) for _, expr in _all_targets())


def test_metric_name_extraction() -> None:
    """The extractor finds metrics through functions, matchers, ranges, grouping and offsets,
    and reports a foreign metric such as `up`, so the check above can fail."""
    expr = (
        'sum by (le) (rate(a_bucket{x="y{z}"}[5m])) / on(pod) group_left(node) b offset 1h'
        " and up > 0.5e3"
    )
    assert metric_names(expr) == {"a_bucket", "b", "up"}
    assert not {"up"} <= metrics.exported_names()
