"""Offline rendering of the Helm chart for tests: helm-python-sdk (Helm's Go SDK, no binary).

The chart's `nats` dependency is not vendored (it cannot be downloaded offline), so `helm lint`
warns that it is missing and rendering simply leaves the subchart out; the chart's own objects,
including the NATS auth Secret and the URL the services use, render as they would with it.
Rendering loads an 85 MB shared library once per process; renders are cached per value set.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gpubus"
RELEASE = "gpubus"
NAMESPACE = "gpubus-system"

#: Value sets every structural test runs against (name -> values given with --set/-f).
VALUE_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "ha": {"scheduler": {"replicas": 2}, "webhook": {"replicas": 2},
           "nats": {"config": {"cluster": {"enabled": True, "replicas": 3}}}},
    "no-webhook": {"webhook": {"enabled": False}},
    "legacy-metrics": {"global": {"legacyMetrics": True}},
    "cert-manager-and-servicemonitors": {"webhook": {"tls": {"certManager": {"enabled": True}}},
                                         "serviceMonitor": {"enabled": True}},
    "hami-migration": {"global": {"schedulerName": "hami-scheduler"}},
    "dashboard-ingress": {"dashboard": {"ingress": {"enabled": True, "className": "nginx",
                                                    "host": "gpus.example.com"}}},
    "external-nats": {"nats": {"enabled": False}, "global": {"nats": {"url": "nats://nats.infra:4222"}},
                      "natsAuth": {"existingSecret": "my-nats-users"}},
}


@functools.cache
def _chart() -> helm.Chart:
    return helm.Chart.load(str(CHART))


def render(values: dict[str, Any]) -> dict[str, str]:
    """Template path -> manifest text, without NOTES.txt."""
    return {path: text for path, text in _render(json.dumps(values, sort_keys=True)).items()
            if not path.endswith("NOTES.txt")}


def notes(values: dict[str, Any]) -> str:
    return next(text for path, text in _render(json.dumps(values, sort_keys=True)).items()
                if path.endswith("NOTES.txt"))


@functools.cache
def _render(values_json: str) -> dict[str, str]:
    return _chart().render(json.loads(values_json), name=RELEASE, namespace=NAMESPACE, is_install=True)


def documents(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Every non-empty YAML document the chart renders with ``values``."""
    docs: list[dict[str, Any]] = []
    for text in render(values).values():
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def lint(values: dict[str, Any]) -> dict[str, Any]:
    return helm.lint(str(CHART), values)


def chart_values() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())  # type: ignore[no-any-return]
