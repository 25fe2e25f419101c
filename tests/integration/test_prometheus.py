"""The dashboards and the chart's alerting rules against a real Prometheus.

A consumer running the demo agent and a scheduler run as processes and handle real traffic
(bookings, a silence wake, a dead letter); Debian's ``prometheus`` (``make prometheus``)
scrapes both, and every expression of both dashboards and every alert of the chart's rules file
is evaluated through Prometheus's HTTP API. An expression that errors, or returns no series
although traffic was sent, fails the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from consumer.processes import free_port
from consumer.topics import TopicSpec, ensure_topics
from tests.fixtures.servers import servers_unavailable
from tests.integration.harness import OutboundReader, produce

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
TURNFLOW = str(Path(sys.executable).with_name("turnflow"))
DASHBOARDS = sorted((REPO / "helm" / "turnflow" / "dashboards").glob("*.json"))
RULES = REPO / "helm" / "turnflow" / "alerts" / "turnflow.rules.yaml"

# What Grafana would put in place of the dashboards' variables.
GRAFANA_VARIABLES = {
    "${namespace}": ".*", "$namespace": ".*", "$__rate_interval": "1m", "$__range": "5m",
    "$topn": "5",
}
_MODEL_ENV = ("OPENAI_API_KEY", "TURNFLOW_MODEL_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY",
              "TURNFLOW_MODEL")


def _prometheus_binary() -> str:
    found = shutil.which("prometheus") or (
        "/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK) else None
    )
    if found is None:
        servers_unavailable("Prometheus is not installed; `make prometheus` installs Debian's")
    return found


def dashboard_expressions() -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target of both dashboards, variables filled in."""
    found: list[tuple[str, str]] = []

    def walk(panels: list[dict[str, Any]], name: str) -> None:
        for panel in panels:
            for target in panel.get("targets", []):
                expr = target["expr"]
                for variable, value in sorted(GRAFANA_VARIABLES.items(), key=lambda v: -len(v[0])):
                    expr = expr.replace(variable, value)
                found.append((f"{name}: {panel.get('title')} ({target.get('refId')})", expr))
            walk(panel.get("panels", []), name)

    for path in DASHBOARDS:
        walk(json.loads(path.read_text())["panels"], path.name)
    return found


def rule_alerts() -> list[str]:
    """The PromQL of every alert the chart ships (helm/turnflow/alerts/turnflow.rules.yaml, the
    rules docs/operating.md's "Alerts" documents)."""
    loaded = yaml.safe_load(RULES.read_text())
    return [" ".join(rule["expr"].split()) for group in loaded["groups"]
            for rule in group["rules"]]


def _without_comparison(expr: str) -> str:
    """``increase(x[5m]) > 0`` -> ``increase(x[5m])``: the series the alert looks at."""
    return re.split(r"\s(?:>|<|>=|<=|==|!=)\s", expr, maxsplit=1)[0]


async def _start(args: list[str], env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *args, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout=30)
        except TimeoutError:
            process.kill()
            await process.wait()


async def _wait_ready(process: asyncio.subprocess.Process, text: str) -> None:
    assert process.stderr is not None
    seen: list[str] = []
    async with asyncio.timeout(60):
        while not any(text in line for line in seen):
            line = (await process.stderr.readline()).decode()
            assert line, f"exited early: {seen[-20:]}"
            seen.append(line)

    async def drain() -> None:  # keep reading, so a full pipe never blocks the process
        assert process.stderr is not None
        while await process.stderr.read(65536):
            pass

    asyncio.get_running_loop().create_task(drain())


class Prometheus:
    """Debian's prometheus on a loopback port, scraping the given targets every second."""

    def __init__(self, binary: str, workdir: Path, targets: dict[str, int]) -> None:
        self.port = free_port()
        self.workdir = workdir
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                  "scrape_configs": [
                      {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
                      for job, port in targets.items()]}
        (workdir / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self.args = [binary, f"--config.file={workdir / 'prometheus.yml'}",
                     f"--storage.tsdb.path={workdir / 'data'}",
                     f"--web.listen-address=127.0.0.1:{self.port}"]
        self.process: asyncio.subprocess.Process | None = None
        self._log: Any = None
        self.client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.port}", timeout=10)

    async def start(self) -> None:
        self._log = (self.workdir / "prometheus.log").open("wb")
        self.process = await asyncio.create_subprocess_exec(
            *self.args, stdout=self._log, stderr=self._log, cwd=self.workdir
        )
        async with asyncio.timeout(30):
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if (await self.client.get("/-/ready")).status_code == 200:
                        return
                assert self.process.returncode is None, self.log()
                await asyncio.sleep(0.2)

    def log(self) -> str:
        return (self.workdir / "prometheus.log").read_text(errors="replace")[-3000:]

    async def query(self, expr: str) -> dict[str, Any]:
        response = await self.client.get("/api/v1/query", params={"query": expr})
        body: dict[str, Any] = response.json()
        return body

    async def until_series(self, expr: str, within: float = 60) -> None:
        """Poll the query until it returns a series, as a dashboard refresh would."""
        async with asyncio.timeout(within):
            while not (await self.query(expr)).get("data", {}).get("result"):  # noqa: ASYNC110
                await asyncio.sleep(0.5)

    async def stop(self) -> None:
        await self.client.aclose()
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            await self.process.wait()
        if self._log is not None:
            self._log.close()


@pytest.fixture
async def prometheus_binary() -> AsyncIterator[str]:
    yield _prometheus_binary()


async def test_dashboards_and_alerts_evaluate_against_live_processes(
    prometheus_binary: str, database_url: str, kafka_bootstrap: str, kafka_is_embedded: bool,
    tmp_path: Path,
) -> None:
    """After real traffic through a live consumer and scheduler, every dashboard expression and
    every alert the chart ships evaluates without error, with series; the DLQ alert fires."""
    suffix = uuid.uuid4().hex[:8]
    topics = {"INBOUND_TOPIC": f"in.prom.{suffix}", "MESSAGES_TOPIC": f"out.prom.{suffix}",
              "SCHEDULE_TOPIC": f"sched.prom.{suffix}", "DLQ_TOPIC": f"dlq.prom.{suffix}"}
    await ensure_topics(kafka_bootstrap, [TopicSpec(name, 2) for name in topics.values()])
    ports = {"consume": free_port(), "schedule": free_port()}
    env = {k: v for k, v in os.environ.items() if k not in _MODEL_ENV}
    env.update(topics)
    env.update({
        "PYTHONPATH": str(REPO), "DATABASE_URL": database_url,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "GROUP_ID": f"prom-{suffix}",
        "METRICS_HOST": "127.0.0.1", "TURNFLOW_DEMO_SILENCE_MS": "1500",
        "KAFKA_IDEMPOTENT_PRODUCER": "false" if kafka_is_embedded else "true",
        "KAFKA_FETCH_MAX_WAIT_MS": "10" if kafka_is_embedded else "500",
    })
    consume = await _start([TURNFLOW, "consume", "--workers", "1", "--agent",
                            "examples.demo_agent:agent"],
                           {**env, "METRICS_PORT": str(ports["consume"])})
    schedule = await _start([TURNFLOW, "schedule"], {**env, "METRICS_PORT": str(ports["schedule"])})
    prometheus = Prometheus(prometheus_binary, tmp_path, ports)
    try:
        await _wait_ready(consume, '"consumer ready"')
        await _wait_ready(schedule, '"scheduler ready"')
        await prometheus.start()
        # Scraping before the traffic, as in a deployment: the pre-created series are seen at 0.
        for job in ports:
            await prometheus.until_series(f'up{{job="{job}"}} == 1')
            await prometheus.until_series(f'turnflow_build_info{{job="{job}"}}')

        sessions = [f"prom-{suffix}-{i}" for i in range(4)]
        script = ["I want to book a repair", "a tune-up on monday", "yes"]
        for turn, text in enumerate(script):
            await produce(kafka_bootstrap, topics["INBOUND_TOPIC"], [
                {"session_id": sid, "message": text, "id": f"{sid}-m{turn}"} for sid in sessions
            ])
            async with OutboundReader(kafka_bootstrap, topics["MESSAGES_TOPIC"]) as replies:
                await replies.until(lambda values, turn=turn: all(
                    sum(1 for v in values if v["session_id"] == sid
                        and v.get("input_id") == f"{sid}-m{turn}") >= 1
                    for sid in sessions), within=60)
        await produce(kafka_bootstrap, topics["INBOUND_TOPIC"], [b"not json"],
                      key=sessions[0].encode())
        # An hours question after the bookings: its reply starts a silence the scheduler wakes.
        await produce(kafka_bootstrap, topics["INBOUND_TOPIC"], [
            {"session_id": sessions[1], "message": "what are your opening hours?", "id": "hours"}
        ])

        # Prometheus has scraped the traffic: the dead letter, the fired wake, the bookings.
        await prometheus.until_series('turnflow_dlq_total{reason="not-json"} > 0')
        await prometheus.until_series("turnflow_wakes_emitted_total > 0")
        await prometheus.until_series('turnflow_outcomes_total{code="action-ok"} > 0')
        await asyncio.sleep(3)  # a few more scrapes, so rates span more than one sample

        failures = []
        for where, expr in dashboard_expressions():
            answer = await prometheus.query(expr)
            if answer.get("status") != "success":
                failures.append(f"{where}: {answer.get('error')} in {expr}")
            elif not answer["data"]["result"]:
                failures.append(f"{where}: no series for {expr}")
        alerts = rule_alerts()
        for expr in alerts:
            answer = await prometheus.query(expr)
            if answer.get("status") != "success":
                failures.append(f"alert: {answer.get('error')} in {expr}")
            looked_at = await prometheus.query(_without_comparison(expr))
            if not looked_at.get("data", {}).get("result"):
                failures.append(f"alert: no series behind {expr}")
        fired = await prometheus.query("increase(turnflow_dlq_total[5m]) > 0")
        assert failures == [], "\n".join(failures) + "\n" + prometheus.log()
        assert len(alerts) >= 12 and len(dashboard_expressions()) >= 30
        assert fired["data"]["result"], "the DLQ alert did not fire after a dead letter"
        # Each process exported only its own families.
        jobs = await prometheus.query("count by (job) (turnflow_turns_total)")
        assert {r["metric"]["job"] for r in jobs["data"]["result"]} == {"consume"}
        built = await prometheus.query("turnflow_build_info")
        # Prometheus drops an empty label: the scheduler's build info has no agent.
        builds = {(r["metric"]["job"], r["metric"].get("agent", ""))
                  for r in built["data"]["result"]}
        assert builds == {("consume", "Ana"), ("schedule", "")}
    finally:
        await prometheus.stop()
        await _stop(consume)
        await _stop(schedule)
