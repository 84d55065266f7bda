"""``gpubus explain`` for a pod that fits nowhere: who would have to go, through the real CLI.

Cases: the snapshot's ``pods`` (ledger entries plus ``priority``) and the pod's ``spec.priority``
give the victims per node and card in ``--json`` and in the table; ``preemptionPolicy: Never``;
equal priority is never a victim; failed ledger entries hold nothing; no ``pods`` list or a pod
that fits: no preemption section (the report stays as it was); bad ``pods`` entries and a bad
``spec.priority`` or ``spec.preemptionPolicy``: one line naming the field, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from services.scheduler.cli import register

CARD = {"id": "GPU-0", "index": 0, "type": "NVIDIA-A100", "devmem": 81920}


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """gpubus (test root)."""

    register(app)
    return app


def held(
    name: str, priority: int | None, mem: int, *, node: str = "n1", state: str = "decided"
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "pod_uid": f"uid-{name}",
        "namespace": "ns",
        "name": name,
        "node": node,
        "devices": [[{"uuid": "GPU-0", "usedmem": mem, "usedcores": 10}]],
        "containers": ["main"],
        "state": state,
    }
    if priority is not None:
        entry["priority"] = priority
    return entry


def cluster(pods: list[dict[str, Any]] | None) -> dict[str, Any]:
    live = [p for p in pods or [] if p.get("state") != "failed"]
    used = {
        "used": len(live),
        "usedmem": sum(p["devices"][0][0]["usedmem"] for p in live),
        "usedcores": 10 * len(live),
    }
    data: dict[str, Any] = {"nodes": [{"name": "n1", "devices": [{**CARD, **used}]}]}
    if pods is not None:
        data["pods"] = pods
    return data


def urgent(mem: int = 40960, **spec: object) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "urgent", "namespace": "ns"},
        "spec": {
            **spec,
            "containers": [
                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mem}}}
            ],
        },
    }


def run(
    app: typer.Typer, tmp_path: Path, data: dict[str, Any], pod: dict[str, Any], *extra: str
) -> tuple[int, str, str]:
    (tmp_path / "c.json").write_text(json.dumps(data))
    (tmp_path / "p.json").write_text(json.dumps(pod))
    result = CliRunner().invoke(
        app, ["explain", "--cluster", str(tmp_path / "c.json"), "--pod", str(tmp_path / "p.json"), *extra]
    )
    return result.exit_code, result.stdout, result.stderr


RESIDENTS = [
    held("batch", 0, 50000),
    held("etl", 500, 20000),
    held("peer", 1000, 8000),
    held("gone", 0, 1000, state="failed"),
]


def test_the_json_report_names_the_victims_per_node_and_card(app: typer.Typer, tmp_path: Path) -> None:
    code, out, _ = run(app, tmp_path, cluster(RESIDENTS), urgent(priority=1000), "--json")
    assert code == 1  # it still fits nowhere now
    report = json.loads(out)
    preemption = report["preemption"]
    assert (preemption["priority"], preemption["policy"], preemption["node"]) == (
        1000,
        "PreemptLowerPriority",
        "n1",
    )
    view = preemption["nodes"]["n1"]
    assert view["card"] == "GPU-0"
    assert view["victims"] == [
        {"namespace": "ns", "name": "batch", "uid": "uid-batch", "priority": 0, "cards": ["GPU-0"]}
    ]
    assert view["containers"] == [[{"uuid": "GPU-0", "type": "NVIDIA", "usedmem": 40960, "usedcores": 0}]]


def test_the_table_says_who_goes_where(app: typer.Typer, tmp_path: Path) -> None:
    code, out, _ = run(app, tmp_path, cluster(RESIDENTS), urgent(priority=1000))
    assert code == 1
    assert "preemption (priority 1000, PreemptLowerPriority): room on n1 by evicting" in out
    assert " *n1    on GPU-0: ns/batch (priority 0)" in out


def test_a_pod_of_the_residents_priority_preempts_no_one(app: typer.Typer, tmp_path: Path) -> None:
    pods = [held("batch", 500, 50000), held("etl", 500, 30000)]
    _, out, _ = run(app, tmp_path, cluster(pods), urgent(priority=500), "--json")
    preemption = json.loads(out)["preemption"]
    assert preemption["node"] is None
    assert preemption["nodes"] == {"n1": {"reason": "no pod of lower priority holds a slice here"}}


def test_a_pod_without_priority_has_priority_0_and_so_have_residents_without(
    app: typer.Typer, tmp_path: Path
) -> None:
    _, out, _ = run(app, tmp_path, cluster([held("batch", None, 80000)]), urgent(), "--json")
    assert json.loads(out)["preemption"]["nodes"]["n1"] == {
        "reason": "no pod of lower priority holds a slice here"
    }


def test_preemption_policy_never_is_honoured(app: typer.Typer, tmp_path: Path) -> None:
    _, out, _ = run(app, tmp_path, cluster(RESIDENTS), urgent(priority=1000, preemptionPolicy="Never"))
    assert (
        "preemption (priority 1000, Never): none (preemptionPolicy is Never: the pod preempts no one)" in out
    )


def test_no_pods_listed_or_a_pod_that_fits_leaves_the_report_as_it_was(
    app: typer.Typer, tmp_path: Path
) -> None:
    _, out, _ = run(app, tmp_path, cluster(None), urgent(priority=1000), "--json")
    assert "preemption" not in json.loads(out)
    code, out, _ = run(app, tmp_path, cluster(RESIDENTS), urgent(mem=1000, priority=1000), "--json")
    assert code == 0 and "preemption" not in json.loads(out)


@pytest.mark.parametrize(
    ("pods", "pod", "message"),
    [
        ("x", urgent(), "pods: expected a list"),
        (
            [{**held("a", 0, 1), "priority": "high"}],
            urgent(),
            "pods[0].priority: expected an integer, got 'high'",
        ),
        (
            [{**held("a", 0, 1), "priority": True}],
            urgent(),
            "pods[0].priority: expected an integer, got True",
        ),
        ([held("a", 0, 1, node="elsewhere")], urgent(), "pods[0].node: no node 'elsewhere' in the snapshot"),
        (
            [{**held("a", 0, 1), "devices": [[{"uuid": "GPU-9", "usedmem": 1, "usedcores": 0}]]}],
            urgent(),
            "pods[0].devices: GPU-9 is not a device of node n1",
        ),
        ([{**held("a", 0, 1), "devices": "GPU-0"}], urgent(), "pods[0].devices"),
        ([7], urgent(), "pods[0]: expected an object"),
        ([], urgent(priority="high"), "spec.priority: expected an integer, got 'high'"),
        (
            [],
            urgent(preemptionPolicy="Sometimes"),
            "spec.preemptionPolicy: expected one of PreemptLowerPriority, Never",
        ),
    ],
)
def test_bad_input_names_the_field_and_exits_2(
    app: typer.Typer, tmp_path: Path, pods: object, pod: dict[str, Any], message: str
) -> None:
    data: dict[str, Any] = {"nodes": cluster(None)["nodes"], "pods": pods}
    code, out, err = run(app, tmp_path, data, pod)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err and "Traceback" not in err
