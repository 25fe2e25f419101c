"""values.yaml against values.schema.json: the defaults pass, and values helm must refuse fail.

Each case is checked twice: by ``jsonschema`` (draft-07, as the schema declares) and by Helm's
own validator, so a schema construct the two read differently (a regex dialect, a format)
cannot pass here and fail at ``helm install``.
"""

from __future__ import annotations

from typing import Any

import helm_python as helm
import jsonschema
import pytest

from tests.helm.helm_chart import CHART_DIR, chart_values, merge_values, schema


def _errors(overrides: dict[str, Any]) -> list[str]:
    values = merge_values(overrides)
    return [e.message for e in jsonschema.Draft7Validator(schema()).iter_errors(values)]


def _helm_errors(overrides: dict[str, Any]) -> str:
    # Helm coalesces the overrides into the chart's defaults itself before it validates.
    with helm.Chart.load(CHART_DIR) as chart:
        try:
            chart.validate_schema(overrides)
        except helm.HelmValuesError as refused:
            return str(refused)
    return ""


def test_schema_is_valid_draft7() -> None:
    """The schema itself is a well-formed draft-07 JSON schema."""
    jsonschema.Draft7Validator.check_schema(schema())


def test_default_values_validate() -> None:
    """The chart's own values.yaml satisfies its schema."""
    assert _errors({}) == []
    assert _helm_errors({}) == ""


def test_every_default_key_is_described_by_the_schema() -> None:
    """Each top-level key in values.yaml is a schema property, so none is silently unchecked."""
    assert set(chart_values()) <= set(schema()["properties"])


GOOD = {
    "SASL with its secrets": {
        "kafka": {
            "securityProtocol": "SASL_SSL",
            "sasl": {"mechanism": "SCRAM-SHA-512", "username": "turnflow"},
        },
        "secrets": {"kafkaSaslPassword": {"name": "kafka-user", "key": "password"}},
    },
    "KEDA on": {"consumer": {"autoscaling": {"enabled": True, "maxReplicas": 40}}},
    "model key from another secret": {
        "secrets": {"modelKeys": {"TURNFLOW_MODEL_API_KEY": {"name": "llm", "key": "token"}}}
    },
    "pdb by minAvailable": {"scheduler": {"pdb": {"enabled": True, "minAvailable": 1}}},
    "plain extra setting": {"extraConfig": {"HISTORY_LIMIT": 20, "RELAY_INTERVAL_MS": "500"}},
    "registry with packs and no fallback agent": {
        "agent": "",
        "registry": {"enabled": True, "packs": ["examples.demo_pack:pack"], "cacheSize": 5000},
    },
    "registry with a fallback agent and no packs": {
        "registry": {"enabled": True, "refreshMs": 0},
    },
}


@pytest.mark.parametrize("overrides", GOOD.values(), ids=GOOD.keys())
def test_valid_overrides_pass(overrides: dict[str, Any]) -> None:
    """Ordinary production overrides validate."""
    assert _errors(overrides) == []
    assert _helm_errors(overrides) == ""


BAD = {
    "database URL as a plain value": {"secrets": {"databaseUrl": "postgresql://u:p@db/turnflow"}},
    "secret ref carrying a value": {
        "secrets": {"databaseUrl": {"name": "db", "key": "url", "value": "postgresql://x"}}
    },
    "database secret without a name": {"secrets": {"databaseUrl": {"name": "", "key": "url"}}},
    "model key as a plain value": {"secrets": {"modelKeys": {"OPENAI_API_KEY": "sk-123"}}},
    "model key env name not an env name": {
        "secrets": {"modelKeys": {"openai-key": {"name": "m", "key": "k"}}}
    },
    "secret in extraConfig": {"extraConfig": {"OPENAI_API_KEY": "sk-123"}},
    "database URL in extraConfig": {"extraConfig": {"DATABASE_URL": "postgresql://x"}},
    "zero max in flight": {"consumer": {"maxInFlight": 0}},
    "negative replicas": {"scheduler": {"replicas": -1}},
    "replicas as text": {"consumer": {"replicas": "two"}},
    "zero partitions": {"kafka": {"partitions": 0}},
    "unknown security protocol": {"kafka": {"securityProtocol": "TLS"}},
    "SASL without username and password secret": {
        "kafka": {"securityProtocol": "SASL_PLAINTEXT", "sasl": {"mechanism": "PLAIN"}}
    },
    "agent not module:attribute": {"agent": "examples/demo_agent.py"},
    "topic name with a space": {"topics": {"inbound": "inbound turns"}},
    "metrics port out of range": {"metrics": {"port": 70000}},
    "bad scrape interval": {"metrics": {"serviceMonitor": {"enabled": True, "interval": "often"}}},
    "root user": {"podSecurityContext": {"runAsUser": 0}},
    "runAsNonRoot off": {"podSecurityContext": {"runAsNonRoot": False}},
    "writable root filesystem": {"securityContext": {"readOnlyRootFilesystem": False}},
    "privilege escalation": {"securityContext": {"allowPrivilegeEscalation": True}},
    "capabilities not dropped": {"securityContext": {"capabilities": {"drop": ["NET_RAW"]}}},
    "capability added": {
        "securityContext": {"capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]}}
    },
    "typo at top level": {"consumers": {"replicas": 3}},
    "typo in a section": {"consumer": {"maxInflight": 8}},
    "bad pull policy": {"image": {"pullPolicy": "Sometimes"}},
    "unknown log level": {"logLevel": "TRACE"},
    "model URL without scheme": {"model": {"openaiBaseUrl": "api.example.com"}},
    "zero KEDA max replicas": {"consumer": {"autoscaling": {"enabled": True, "maxReplicas": 0}}},
    "no agent and no registry": {"agent": ""},
    "registry switch as text": {"registry": {"enabled": "yes"}},
    "packs as one comma-separated string": {
        "registry": {"enabled": True, "packs": "examples.demo_pack:pack,shop.packs:crm"}
    },
    "pack not module:attribute": {"registry": {"enabled": True, "packs": ["examples/pack.py"]}},
    "the same pack twice": {
        "registry": {"enabled": True, "packs": ["shop.packs:crm", "shop.packs:crm"]}
    },
    "zero agent cache": {"registry": {"enabled": True, "cacheSize": 0}},
    "negative refresh": {"registry": {"enabled": True, "refreshMs": -1}},
    "typo in registry": {"registry": {"enabled": True, "cachesize": 10}},
    "registry setting in extraConfig": {"extraConfig": {"AGENT_REGISTRY": "true"}},
    "packs in extraConfig": {"extraConfig": {"PACKS": "shop.packs:crm"}},
}


@pytest.mark.parametrize("overrides", BAD.values(), ids=BAD.keys())
def test_bad_values_are_rejected(overrides: dict[str, Any]) -> None:
    """Each of these values is refused by the schema, so helm refuses to install with it."""
    assert _errors(overrides) != []
    assert _helm_errors(overrides) != ""


def test_required_sections_cannot_be_removed() -> None:
    """Deleting the database secret reference (a null override) fails validation."""
    assert _errors({"secrets": {"databaseUrl": None}}) != []
    assert "databaseUrl" in _helm_errors({"secrets": {"databaseUrl": None}})
