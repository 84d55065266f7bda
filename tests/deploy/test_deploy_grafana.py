"""The Grafana dashboard (deploy/grafana/*.json) queries only metrics gpubus exports.

Every metric name in every panel query and template variable must be one the scheduler or the
monitor defines (their metrics modules), so a renamed metric breaks this test, not a dashboard.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from helmchart import ROOT

DASHBOARDS = sorted((ROOT / "deploy" / "grafana").glob("*.json"))
EXPORTERS = (ROOT / "services" / "scheduler" / "metrics.py", ROOT / "services" / "monitor" / "metrics.py")
_METRIC = re.compile(r"\b(hami_[a-z0-9_]+)\b")


def _exported() -> set[str]:
    return {name for path in EXPORTERS if path.exists() for name in _METRIC.findall(path.read_text())}


def _queries(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return exprs


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def test_there_is_a_dashboard() -> None:
    assert DASHBOARDS


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_queries_only_exported_hami_metrics(path: Path) -> None:
    missing = [p.name for p in EXPORTERS if not p.exists()]
    if missing:
        pytest.skip(f"metrics modules not written yet: {missing}")
    used = {m for expr in _queries(_load(path)) for m in _METRIC.findall(expr)}
    assert used, "dashboard queries no hami_* metric"
    assert used <= _exported(), f"not exported by gpubus: {sorted(used - _exported())}"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_is_importable(path: Path) -> None:
    dashboard = _load(path)
    assert dashboard["uid"] and dashboard["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}"
    assert {v["name"] for v in dashboard["templating"]["list"]} >= {"datasource", "node", "namespace"}
