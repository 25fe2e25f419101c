"""Values the chart tests render with: defaults, every option on, and every option off."""

from __future__ import annotations

from typing import Any

__all__ = ["ALL_OFF", "ALL_ON", "CASES"]

ALL_ON: dict[str, Any] = {
    "kafka": {
        "securityProtocol": "SASL_SSL",
        "sasl": {"mechanism": "SCRAM-SHA-512", "username": "turnflow"},
        "tls": {"caSecret": {"name": "kafka-ca", "key": "ca.crt"}},
    },
    "secrets": {"kafkaSaslPassword": {"name": "kafka-user", "key": "password"}},
    "model": {
        "name": "gpt-4o-mini",
        "openaiBaseUrl": "https://llm.internal/v1",
        "anthropicBaseUrl": "https://anthropic.internal",
        "timeoutSeconds": 20,
        "maxTokens": 512,
        "jsonMode": "json_object_schema",
    },
    "extraConfig": {"HISTORY_LIMIT": 20},
    "registry": {
        "enabled": True,
        "packs": ["examples.demo_pack:pack", "shop.packs:crm"],
        "cacheSize": 1000,
        "refreshMs": 500,
    },
    "imagePullSecrets": [{"name": "registry"}],
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
    "prometheusRule": {
        "enabled": True, "labels": {"release": "prometheus"},
        "runbookBaseUrl": "https://git.example.com/turnflow/blob/main/",
        "additionalLabels": {"team": "chat"},
    },
    "consumer": {
        "autoscaling": {"enabled": True, "maxReplicas": 40, "authenticationRef": "kafka-auth"},
        "podAnnotations": {"example.com/team": "chat"},
        "nodeSelector": {"pool": "workers"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "chat"}],
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
            }
        ],
    },
    "scheduler": {"pdb": {"enabled": True, "minAvailable": 1}, "affinity": {"podAntiAffinity": {}}},
    "serviceAccount": {"annotations": {"example.com/role": "turnflow"}},
    "dashboards": {"namespace": "monitoring", "folder": "turnflow"},
    "inspector": {"enabled": True, "agent": "examples.demo_agent:agent",
                  "nodeSelector": {"pool": "tools"}},
}

ALL_OFF: dict[str, Any] = {
    "migrations": {"enabled": False},
    "dashboards": {"enabled": False},
    "serviceAccount": {"create": False},
    "consumer": {"pdb": {"enabled": False}},
    "scheduler": {"pdb": {"enabled": False}, "replicas": 0},
    "secrets": {"modelKeys": {}},
}

CASES: dict[str, dict[str, Any]] = {"defaults": {}, "all on": ALL_ON, "all off": ALL_OFF}
