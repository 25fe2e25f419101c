"""The chart's templates, rendered by Helm's own template engine (see helm_chart.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import helm_python as helm
import pytest

from consumer.cli import COMMANDS
from consumer.settings import Settings
from engine.providers import anthropic, openai
from tests.helm.helm_chart import CHART_DIR, RenderedChart, render_chart
from tests.helm.values_cases import ALL_ON, CASES

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Read by engine.providers.settings.provider_from_env, not by the Settings model.
_PROVIDER_SETTINGS = {
    "TURNFLOW_MODEL",
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
    "TURNFLOW_MODEL_TIMEOUT",
    "TURNFLOW_MODEL_MAX_TOKENS",
    "TURNFLOW_MODEL_JSON_MODE",
}
_MODEL_KEY_ENV = {*openai.API_KEY_ENV, anthropic.API_KEY_ENV}
_SECRET_ENV = {"DATABASE_URL", "MIGRATE_DATABASE_URL", "KAFKA_SASL_PASSWORD", *_MODEL_KEY_ENV}


def _pod_specs(chart: RenderedChart) -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]
        for d in chart.documents()
        if d["kind"] in ("Deployment", "Job")
    }


def _containers(chart: RenderedChart) -> list[dict[str, Any]]:
    return [c for spec in _pod_specs(chart).values() for c in spec["containers"]]


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("overrides", CASES.values(), ids=CASES.keys())
def test_every_template_renders_to_kubernetes_yaml(overrides: dict[str, Any]) -> None:
    """Each template renders to YAML documents that each carry apiVersion, kind and a DNS name."""
    chart = render_chart(overrides)
    assert chart.files.keys() == {p.name for p in (CHART_DIR / "templates").glob("*.yaml")}
    documents = chart.documents()
    assert documents
    for doc in documents:
        assert doc["apiVersion"] and doc["kind"]
        name = doc["metadata"]["name"]
        assert _DNS_LABEL.match(name) and len(name) <= 63, name


def test_default_objects() -> None:
    """Defaults render both Deployments, the hook Job, the metrics Service, two PDBs, two
    ConfigMaps and a ServiceAccount, with no ServiceMonitor or ScaledObject."""
    assert sorted(render_chart().kinds()) == sorted(
        [
            "ConfigMap",
            "ConfigMap",
            "Deployment",
            "Deployment",
            "Job",
            "PodDisruptionBudget",
            "PodDisruptionBudget",
            "Service",
            "ServiceAccount",
        ]
    )


def test_optional_objects_follow_their_switches() -> None:
    """ServiceMonitor and ScaledObject appear only when enabled; the hook Job, dashboards, PDBs
    and ServiceAccount disappear when switched off."""
    on = render_chart(ALL_ON).kinds()
    assert on.count("ServiceMonitor") == 1 and on.count("ScaledObject") == 1
    off = render_chart(CASES["all off"]).kinds()
    assert sorted(off) == ["ConfigMap", "Deployment", "Deployment", "Service"]


@pytest.mark.parametrize("overrides", CASES.values(), ids=CASES.keys())
def test_no_secret_is_rendered(overrides: dict[str, Any]) -> None:
    """The chart never renders a Secret object."""
    assert "Secret" not in render_chart(overrides).kinds()


@pytest.mark.parametrize("overrides", CASES.values(), ids=CASES.keys())
def test_secret_settings_come_only_from_secret_references(overrides: dict[str, Any]) -> None:
    """DATABASE_URL, model keys and the SASL password reach containers only through
    secretKeyRef, and never appear in the ConfigMap."""
    chart = render_chart(overrides)
    for container in _containers(chart):
        for env in container.get("env", []):
            if env["name"] in _SECRET_ENV:
                assert "value" not in env, env
                assert set(env["valueFrom"]) == {"secretKeyRef"}
    settings = chart.one("ConfigMap", "turnflow")["data"]
    assert not set(settings) & _SECRET_ENV


def test_secret_references_use_the_configured_names_and_keys() -> None:
    """The consumer reads DATABASE_URL, the SASL password and each model key from the Secret
    name and key given in values."""
    chart = render_chart(ALL_ON)
    env = {
        e["name"]: e
        for e in chart.one("Deployment", "-consumer")["spec"]["template"]["spec"]["containers"][0][
            "env"
        ]
    }
    assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "turnflow-database",
        "key": "DATABASE_URL",
    }
    assert env["KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "kafka-user",
        "key": "password",
    }
    assert env["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "turnflow-model",
        "key": "OPENAI_API_KEY",
        "optional": True,
    }


def test_configmap_keys_are_settings_the_code_reads() -> None:
    """Every ConfigMap key (options all on) is a Settings field or a provider setting."""
    known = {name.upper() for name in Settings.model_fields} | _PROVIDER_SETTINGS
    data = render_chart(ALL_ON).one("ConfigMap", "turnflow")["data"]
    extra = set(ALL_ON["extraConfig"])
    assert set(data) - extra <= known, set(data) - extra - known
    assert {
        "AGENT",
        "KAFKA_BOOTSTRAP_SERVERS",
        "MAX_IN_FLIGHT",
        "INBOUND_TOPIC",
        "KAFKA_SASL_MECHANISM",
        "KAFKA_SSL_CAFILE",
        "TURNFLOW_MODEL",
    } <= set(data)


def test_secret_env_names_are_read_by_the_code() -> None:
    """The secret-backed variables are ones Settings or the providers read."""
    fields = {name.upper() for name in Settings.model_fields}
    assert {"DATABASE_URL", "KAFKA_SASL_PASSWORD"} <= fields
    defaults = render_chart().one("Deployment", "-consumer")["spec"]["template"]["spec"]
    model_env = {e["name"] for e in defaults["containers"][0]["env"]} - {"DATABASE_URL"}
    assert model_env and model_env <= _MODEL_KEY_ENV


def test_configmap_values_come_from_values() -> None:
    """Topic names, agent, in-flight limit and port in the ConfigMap are the configured ones."""
    data = render_chart(
        {
            "agent": "shop.agents:support",
            "topics": {"inbound": "in.v2"},
            "consumer": {"maxInFlight": 7},
            "metrics": {"port": 9500},
        }
    ).one("ConfigMap", "turnflow")["data"]
    assert data["AGENT"] == "shop.agents:support"
    assert data["INBOUND_TOPIC"] == "in.v2"
    assert data["MAX_IN_FLIGHT"] == "7"
    assert data["METRICS_PORT"] == "9500"
    assert all(isinstance(v, str) for v in data.values())


@pytest.mark.parametrize("component", ["consumer", "scheduler"])
def test_services_probe_health_endpoints(component: str) -> None:
    """Liveness checks /healthz and readiness /readyz on the metrics port, which is METRICS_PORT."""
    chart = render_chart({"metrics": {"port": 9555}})
    deployment = chart.one("Deployment", f"-{component}")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["consume" if component == "consumer" else "schedule"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["ports"] == [{"name": "metrics", "containerPort": 9555, "protocol": "TCP"}]
    assert chart.one("ConfigMap", "turnflow")["data"]["METRICS_PORT"] == "9555"


@pytest.mark.parametrize("overrides", CASES.values(), ids=CASES.keys())
def test_pods_run_as_non_root_with_read_only_root_filesystem(overrides: dict[str, Any]) -> None:
    """Every pod runs as a non-root user, read-only root FS, no privilege escalation, all
    capabilities dropped, a writable emptyDir /tmp, and no service-account token."""
    for name, spec in _pod_specs(render_chart(overrides)).items():
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["runAsUser"] > 0, name
        assert spec["automountServiceAccountToken"] is False, name
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert "emptyDir" in volumes["tmp"]
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"]
            assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def test_every_container_has_requests_and_a_memory_limit() -> None:
    """Each container declares CPU and memory requests and a memory limit."""
    for container in _containers(render_chart()):
        assert {"cpu", "memory"} <= set(container["resources"]["requests"])
        assert "memory" in container["resources"]["limits"]


def test_every_container_has_a_cpu_limit_and_the_consumer_one_core() -> None:
    """Each container has a CPU limit by default, and the consumer's is one core: a single
    event loop uses no more, and less would throttle every turn."""
    for container in _containers(render_chart()):
        assert "cpu" in container["resources"]["limits"], container["name"]
    consumer = render_chart().one("Deployment", "-consumer")["spec"]["template"]["spec"]
    assert consumer["containers"][0]["resources"]["limits"]["cpu"] == "1000m"


def test_only_the_consumer_gets_model_keys() -> None:
    """With every option on, the consumer reads the model keys from their Secrets and the
    scheduler reads none of them (it never calls a model), while both still read
    DATABASE_URL and the SASL password."""
    chart = render_chart(ALL_ON)
    envs = {
        name: {e["name"] for e in chart.one("Deployment", name)["spec"]["template"]["spec"][
            "containers"][0]["env"]}
        for name in ("-consumer", "-scheduler")
    }
    assert "OPENAI_API_KEY" in envs["-consumer"]
    assert not envs["-scheduler"] & _MODEL_KEY_ENV
    for env in envs.values():
        assert {"DATABASE_URL", "KAFKA_SASL_PASSWORD"} <= env


def test_migration_job_is_a_pre_install_pre_upgrade_pre_rollback_hook() -> None:
    """The migrate Job runs `migrate` as a pre-install/pre-upgrade/pre-rollback hook and reads
    only the database Secret, since the release's own ConfigMap does not exist yet when it
    runs."""
    job = render_chart().one("Job", "-migrate")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade,pre-rollback"
    assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"]
    spec = job["spec"]["template"]["spec"]
    assert spec["restartPolicy"] == "Never"
    assert "serviceAccountName" not in spec
    container = spec["containers"][0]
    assert container["args"] == ["migrate"]
    assert "envFrom" not in container
    env = {e["name"]: e for e in container["env"]}
    assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "turnflow-database"
    assert set(env) == {"DATABASE_URL", "LOG_LEVEL"}


def test_the_migration_job_takes_a_direct_url_when_given() -> None:
    """With ``secrets.migrateDatabaseUrl`` named, the migrate Job reads MIGRATE_DATABASE_URL
    (a direct connection beside a pooled DATABASE_URL) from that Secret."""
    chart = render_chart({"secrets": {"migrateDatabaseUrl": {"name": "db-direct"}}})
    container = chart.one("Job", "-migrate")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["MIGRATE_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "db-direct", "key": "MIGRATE_DATABASE_URL",
    }


def test_metrics_service_selects_the_services_and_not_the_migration() -> None:
    """The metrics Service's selector matches consumer and scheduler pods, not the hook's pod,
    and the ServiceMonitor selects that Service by its labels and named port."""
    chart = render_chart(ALL_ON)
    service = chart.one("Service", "-metrics")
    selector = service["spec"]["selector"]
    pods = {
        d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
        for d in chart.documents()
        if d["kind"] in ("Deployment", "Job")
    }
    assert {n for n, labels in pods.items() if _matches(selector, labels)} == {
        "prod-turnflow-consumer",
        "prod-turnflow-scheduler",
    }
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    monitor = chart.one("ServiceMonitor")
    assert _matches(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"


def test_deployment_selectors_match_their_own_pods_only() -> None:
    """Each Deployment's selector matches its pod template and not the other Deployment's."""
    chart = render_chart()
    consumer = chart.one("Deployment", "-consumer")["spec"]
    scheduler = chart.one("Deployment", "-scheduler")["spec"]
    assert _matches(consumer["selector"]["matchLabels"], consumer["template"]["metadata"]["labels"])
    assert not _matches(
        consumer["selector"]["matchLabels"], scheduler["template"]["metadata"]["labels"]
    )
    assert _matches(
        scheduler["selector"]["matchLabels"], scheduler["template"]["metadata"]["labels"]
    )


@pytest.mark.parametrize(("max_replicas", "partitions", "expected"), [(40, 8, 8), (4, 8, 4)])
def test_keda_max_replicas_is_capped_at_partitions(
    max_replicas: int, partitions: int, expected: int
) -> None:
    """The ScaledObject's maxReplicaCount is the smaller of maxReplicas and the partitions."""
    chart = render_chart(
        {
            "kafka": {"partitions": partitions},
            "consumer": {"autoscaling": {"enabled": True, "maxReplicas": max_replicas}},
        }
    )
    assert chart.one("ScaledObject")["spec"]["maxReplicaCount"] == expected


def test_keda_scales_the_consumer_on_its_group_lag() -> None:
    """The Kafka trigger watches the inbound topic for the consumer's group, and the consumer
    Deployment leaves replicas to KEDA."""
    chart = render_chart(ALL_ON)
    scaled = chart.one("ScaledObject")["spec"]
    assert scaled["scaleTargetRef"]["name"] == "prod-turnflow-consumer"
    trigger = scaled["triggers"][0]
    assert trigger["type"] == "kafka"
    assert trigger["metadata"]["topic"] == "inbound.turns"
    assert trigger["metadata"]["consumerGroup"] == "turnflow"
    assert trigger["metadata"]["allowIdleConsumers"] == "false"
    assert all(isinstance(v, str) for v in trigger["metadata"].values())
    assert trigger["authenticationRef"] == {"name": "kafka-auth"}
    assert "replicas" not in chart.one("Deployment", "-consumer")["spec"]
    assert render_chart().one("Deployment", "-consumer")["spec"]["replicas"] == 2


def test_dashboards_configmap_carries_every_dashboard_with_the_sidecar_label() -> None:
    """The dashboards ConfigMap has the grafana_dashboard: "1" label and each dashboard file,
    byte for byte."""
    chart = render_chart(ALL_ON)
    config_map = chart.one("ConfigMap", "-dashboards")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["annotations"]["grafana_folder"] == "turnflow"
    files = {p.name: p.read_text() for p in (CHART_DIR / "dashboards").glob("*.json")}
    assert len(files) >= 2
    assert config_map["data"].keys() == files.keys()
    for name, text in files.items():
        assert json.loads(config_map["data"][name]) == json.loads(text)


def test_config_change_rolls_the_pods() -> None:
    """A settings change alters the pods' config checksum, so the Deployments roll."""

    def checksum(chart: RenderedChart, component: str) -> str:
        pod = chart.one("Deployment", f"-{component}")["spec"]["template"]["metadata"]
        return str(pod["annotations"]["checksum/config"])

    before, after = render_chart(), render_chart({"consumer": {"maxInFlight": 8}})
    for component in ("consumer", "scheduler"):
        assert checksum(before, component) != checksum(after, component)
    assert checksum(before, "consumer") == checksum(render_chart(), "consumer")


def test_pdb_defaults_to_max_unavailable_and_min_available_wins() -> None:
    """PDBs allow one voluntary disruption by default; minAvailable replaces it when set."""
    chart = render_chart(ALL_ON)
    assert chart.one("PodDisruptionBudget", "-consumer")["spec"]["maxUnavailable"] == 1
    scheduler = chart.one("PodDisruptionBudget", "-scheduler")["spec"]
    assert scheduler["minAvailable"] == 1 and "maxUnavailable" not in scheduler


def test_kafka_tls_ca_is_mounted_where_the_setting_points() -> None:
    """With a CA Secret, the file KAFKA_SSL_CAFILE names is mounted from it."""
    chart = render_chart(ALL_ON)
    path = chart.one("ConfigMap", "turnflow")["data"]["KAFKA_SSL_CAFILE"]
    spec = chart.one("Deployment", "-scheduler")["spec"]["template"]["spec"]
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "kafka-ca")
    volume = next(v for v in spec["volumes"] if v["name"] == "kafka-ca")
    assert path == f"{mount['mountPath']}/{volume['secret']['items'][0]['path']}"
    assert volume["secret"]["secretName"] == "kafka-ca"


def test_full_name_is_not_doubled_when_the_release_holds_the_chart_name() -> None:
    """A release named `turnflow-prod` names objects `turnflow-prod-*`, not
    `turnflow-prod-turnflow-*`."""
    chart = render_chart(release="turnflow-prod")
    assert chart.one("Deployment", "-consumer")["metadata"]["name"] == "turnflow-prod-consumer"


def test_notes_name_the_release_the_secrets_and_the_replica_cap() -> None:
    """NOTES.txt names the release, the Secrets read and the capped KEDA replica range."""
    notes = render_chart(ALL_ON | {"kafka": {**ALL_ON["kafka"], "partitions": 6}}).notes
    assert "release prod in chat" in notes
    assert "DATABASE_URL from turnflow-database/DATABASE_URL" in notes
    assert "KEDA, 1 to 6 replicas" in notes
    assert "{{" not in notes
    assert ("Agents:    from the registry (packs: examples.demo_pack:pack, shop.packs:crm); "
            "examples.demo_agent:agent answers conversations that name none") in notes
    assert "Agent:     examples.demo_agent:agent" in render_chart().notes
    assert "(packs: none)\n" in render_chart({"agent": "", "registry": {"enabled": True}}).notes


def test_consumer_grace_period_outlasts_its_drain_timeout() -> None:
    """Kubernetes waits longer after SIGTERM than the consumer's drain timeout, so in-flight
    turns finish and offsets commit before the pod is killed."""
    chart = render_chart()
    spec = chart.one("Deployment", "-consumer")["spec"]["template"]["spec"]
    data = chart.one("ConfigMap", "turnflow")["data"]
    drain_ms = int(data.get("DRAIN_TIMEOUT_MS", Settings.model_fields["drain_timeout_ms"].default))
    assert spec["terminationGracePeriodSeconds"] * 1000 > drain_ms


def test_every_container_runs_a_turnflow_command() -> None:
    """Each container's args name a subcommand of the `turnflow` console script."""
    args = {c["name"]: c["args"] for c in _containers(render_chart())}
    assert args == {"consumer": ["consume"], "scheduler": ["schedule"], "migrate": ["migrate"]}
    assert all(a[0] in COMMANDS for a in args.values())


def test_model_tuning_values_reach_the_configmap() -> None:
    """model.maxTokens and model.jsonMode become the provider's variables; unset, neither is
    written and the provider's defaults hold."""
    data = render_chart(ALL_ON).one("ConfigMap", "turnflow")["data"]
    assert data["TURNFLOW_MODEL_MAX_TOKENS"] == "512"
    assert data["TURNFLOW_MODEL_JSON_MODE"] == "json_object_schema"
    defaults = render_chart().one("ConfigMap", "turnflow")["data"]
    assert not {"TURNFLOW_MODEL_MAX_TOKENS", "TURNFLOW_MODEL_JSON_MODE"} & set(defaults)


def test_chart_json_modes_are_the_providers() -> None:
    """The values schema allows exactly the json modes the OpenAI-compatible provider reads."""
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    allowed = schema["properties"]["model"]["properties"]["jsonMode"]["enum"]
    assert allowed == ["", *openai.JSON_MODES]


def test_the_inspector_is_off_by_default_and_reads_with_its_own_credentials() -> None:
    """The optional inspector: absent by default; when on, a Deployment and a Service whose pod
    gets the read-only URL and the token from their own Secrets, never the services'
    DATABASE_URL or a model key, and runs ``turnflow ui`` behind the token on a probe that
    needs none."""
    assert not [d for d in render_chart().documents() if "inspector" in d["metadata"]["name"]]
    chart = render_chart(ALL_ON)
    pod = chart.one("Deployment", "-inspector")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"][:3] == ["ui", "--host", "0.0.0.0"]
    assert container["args"][-1] == "examples.demo_agent:agent"
    assert "ui" in COMMANDS
    env = {e["name"]: e for e in container["env"]}
    assert env["INSPECT_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "turnflow-inspector-database", "key": "INSPECT_DATABASE_URL"}
    assert env["TURNFLOW_UI_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "turnflow-inspector-token", "key": "TURNFLOW_UI_TOKEN"}
    assert not set(env) & ({"DATABASE_URL"} | _MODEL_KEY_ENV) and "envFrom" not in container
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    service = chart.one("Service", "-inspector")
    assert _matches(service["spec"]["selector"], pod.get("labels") or chart.one(
        "Deployment", "-inspector")["spec"]["template"]["metadata"]["labels"])
    assert pod["nodeSelector"] == {"pool": "tools"}


def test_the_inspectors_trace_url_is_set_only_when_given() -> None:
    """``inspector.traceUrl`` becomes the pod's TURNFLOW_TRACE_URL; empty, the variable is not
    set; a value the inspector would refuse (no ``{trace_id}``, not http) the schema refuses."""
    url = "http://localhost:16686/trace/{trace_id}"
    on = render_chart({"inspector": {"enabled": True, "traceUrl": url}})
    container = on.one("Deployment", "-inspector")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "TURNFLOW_TRACE_URL", "value": url} in container["env"]
    off = render_chart({"inspector": {"enabled": True}})
    container = off.one("Deployment", "-inspector")["spec"]["template"]["spec"]["containers"][0]
    assert "TURNFLOW_TRACE_URL" not in {e["name"] for e in container["env"]}
    for bad in ("http://localhost:16686/trace/", "javascript:{trace_id}"):
        with pytest.raises(helm.HelmValuesError):
            render_chart({"inspector": {"enabled": True, "traceUrl": bad}})


_REGISTRY_KEYS = {"AGENT_REGISTRY", "PACKS", "AGENT_CACHE_SIZE", "AGENT_REFRESH_MS"}


def test_registry_values_reach_the_configmap_as_settings_the_consumer_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """registry.* become AGENT_REGISTRY, PACKS (joined by commas), AGENT_CACHE_SIZE and
    AGENT_REFRESH_MS, and Settings reads them back as the configured values."""
    data = render_chart(ALL_ON).one("ConfigMap", "turnflow")["data"]
    assert {k: data[k] for k in _REGISTRY_KEYS} == {
        "AGENT_REGISTRY": "true",
        "PACKS": "examples.demo_pack:pack,shop.packs:crm",
        "AGENT_CACHE_SIZE": "1000",
        "AGENT_REFRESH_MS": "500",
    }
    for name, value in data.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.agent_registry is True
    assert settings.packs == "examples.demo_pack:pack,shop.packs:crm"
    assert (settings.agent_cache_size, settings.agent_refresh_ms) == (1000, 500)
    assert settings.agent == "examples.demo_agent:agent"  # the fallback for unnamed conversations


def test_registry_is_off_by_default_and_needs_no_agent_when_on() -> None:
    """By default no registry setting is written (the consumer runs `agent` alone); with the
    registry on and `agent` empty, no AGENT is written either, and the inspector gets no empty
    --agent."""
    defaults = render_chart().one("ConfigMap", "turnflow")["data"]
    assert not _REGISTRY_KEYS & set(defaults)
    assert defaults["AGENT"] == "examples.demo_agent:agent"
    chart = render_chart({
        "agent": "",
        "registry": {"enabled": True},
        "inspector": {"enabled": True},
    })
    data = chart.one("ConfigMap", "turnflow")["data"]
    assert "AGENT" not in data
    assert data["AGENT_REGISTRY"] == "true" and data["PACKS"] == ""
    assert (data["AGENT_CACHE_SIZE"], data["AGENT_REFRESH_MS"]) == ("256", "1000")
    pod = chart.one("Deployment", "-inspector")["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "--agent" not in args and "" not in args
