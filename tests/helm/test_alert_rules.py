"""The alerting rules the chart ships (helm/turnflow/alerts/turnflow.rules.yaml, rendered as a
PrometheusRule): checked by Debian's ``promtool test rules`` on synthetic series
(tests/helm/alert_rules_test.yaml), each with a severity, a summary and a runbook section of
docs/operating.md that exists."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.servers import servers_unavailable
from tests.helm.helm_chart import CHART_DIR, render_chart

REPO = CHART_DIR.parents[1]
RULES = CHART_DIR / "alerts" / "turnflow.rules.yaml"
PROMTOOL_CASES = Path(__file__).with_name("alert_rules_test.yaml")
OPERATING = REPO / "docs" / "operating.md"


def _promtool() -> str:
    found = shutil.which("promtool") or (
        "/usr/bin/promtool" if os.access("/usr/bin/promtool", os.X_OK) else None
    )
    if found is None:
        servers_unavailable("promtool is not installed; `make prometheus` installs Debian's")
    return found


def shipped_rules() -> list[dict[str, Any]]:
    """Every rule of the rules file, in order."""
    loaded = yaml.safe_load(RULES.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_the_rendered_rules_pass_promtools_cases(tmp_path: Path) -> None:
    """The groups of the chart's PrometheusRule, written out as a rules file, pass every case
    of alert_rules_test.yaml under ``promtool test rules``: each alert fires on the series it
    is about and stays quiet on the ones it is not."""
    promtool = _promtool()
    rendered = render_chart({"prometheusRule": {"enabled": True}}).one("PrometheusRule")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rendered["spec"]["groups"]}))
    cases = yaml.safe_load(PROMTOOL_CASES.read_text())
    cases["rule_files"] = ["rules.yaml"]
    (tmp_path / "cases.yaml").write_text(yaml.safe_dump(cases, sort_keys=False))
    checked = subprocess.run(
        [promtool, "test", "rules", "cases.yaml"], cwd=tmp_path, capture_output=True, text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


def test_every_alert_has_a_case_that_fires_it() -> None:
    """Each shipped alert is expected to fire in at least one promtool case, so none goes
    untested."""
    cases = yaml.safe_load(PROMTOOL_CASES.read_text())["tests"]
    fired = {
        check["alertname"] for case in cases for check in case["alert_rule_test"]
        if check.get("exp_alerts")
    }
    assert {rule["alert"] for rule in shipped_rules()} == fired


def test_every_alert_has_a_severity_a_summary_and_a_runbook_section() -> None:
    """Each alert is warning or critical, says in a summary what happened, and its runbook_url
    is a heading of docs/operating.md that names the alert."""
    headings = {
        _anchor(line.lstrip("#")) for line in OPERATING.read_text().splitlines()
        if line.startswith("#")
    }
    for rule in shipped_rules():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]
        page, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert page == "docs/operating.md", rule["alert"]
        assert anchor == rule["alert"].lower() and anchor in headings, rule["alert"]


def test_the_rule_object_is_off_by_default_and_carries_the_file_when_on() -> None:
    """No PrometheusRule unless enabled; enabled, its groups are the rules file's, each
    runbook_url behind the configured base and each alert with the additional labels beside
    its own severity."""
    assert "PrometheusRule" not in render_chart().kinds()
    base = "https://git.example.com/turnflow/blob/main/"
    rendered = render_chart({"prometheusRule": {
        "enabled": True, "runbookBaseUrl": base, "labels": {"release": "prometheus"},
        "additionalLabels": {"team": "chat", "severity": "page"},
    }}).one("PrometheusRule")
    assert rendered["metadata"]["labels"]["release"] == "prometheus"
    rules = [rule for group in rendered["spec"]["groups"] for rule in group["rules"]]
    shipped = shipped_rules()
    assert [r["alert"] for r in rules] == [r["alert"] for r in shipped]
    for got, source in zip(rules, shipped, strict=True):
        assert got["expr"] == source["expr"]
        assert got.get("for") == source.get("for")
        assert got["annotations"]["runbook_url"] == base + source["annotations"]["runbook_url"]
        assert got["labels"] == {"team": "chat", "severity": source["labels"]["severity"]}


def test_a_runbook_base_that_is_not_a_url_directory_is_refused() -> None:
    """``runbookBaseUrl`` must be empty or an http(s) URL ending in a slash (the schema)."""
    with pytest.raises(Exception, match="runbookBaseUrl"):
        render_chart({"prometheusRule": {"enabled": True, "runbookBaseUrl": "docs"}})
