"""``gpubus explain`` through the real CLI (typer's CliRunner on files in tmp_path).

Cases: exit 0 with a chosen node, exit 1 when nothing fits (with HAMi reason strings), the --json
shape (a stable interface), the human table, and bad input -> one-line error naming the field, exit 2:
missing file, not JSON/YAML, wrong types, negative sizes, unparsable quantities, bad annotations.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from services.scheduler.cli import register

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """gpubus (test root)."""

    register(app)
    return app


def run(app: typer.Typer, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["explain", *args])
    return result.exit_code, result.stdout, result.stderr


def device(i: int, **kw: object) -> dict[str, object]:
    return {"id": f"GPU-{i}", "index": i, "type": "NVIDIA-A10", "devmem": 24000, **kw}


def write(tmp_path: Path, nodes: list[Any], pod: dict[str, object]) -> tuple[str, str]:
    cluster, manifest = tmp_path / "cluster.json", tmp_path / "pod.yaml"
    cluster.write_text(json.dumps({"nodes": nodes}))
    manifest.write_text(json.dumps(pod))
    return str(cluster), str(manifest)


def gpu_pod(limits: dict[str, object], annotations: dict[str, str] | None = None) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "annotations": annotations or {}},
        "spec": {"containers": [{"name": "side"}, {"name": "main", "resources": {"limits": limits}}]},
    }


def test_json_report_for_a_fitting_pod(app: typer.Typer, tmp_path: Path) -> None:
    nodes = [
        {"name": "a", "devices": [device(0, used=1, usedmem=20000, usedcores=10), device(1)]},
        {"name": "b", "annotations": {"x": "y"}, "devices": [device(0, health=False)]},
    ]
    cluster, pod = write(
        tmp_path, nodes, gpu_pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 8000, "nvidia.com/gpucores": 20})
    )
    code, out, err = run(app, "--cluster", cluster, "--pod", pod, "--json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["chosen"] == "a"
    assert report["requests"] == [
        {"name": "side", "nums": 0, "memreq": 0, "mempercentagereq": 101, "coresreq": 0},
        {"name": "main", "nums": 1, "memreq": 8000, "mempercentagereq": 101, "coresreq": 20},
    ]
    a, b = report["nodes"]["a"], report["nodes"]["b"]
    assert a["fit"] is True and a["reason"] == "" and a["reasons"] == {}
    assert a["containers"] == [[], [{"uuid": "GPU-1", "type": "NVIDIA", "usedmem": 8000, "usedcores": 20}]]
    assert a["annotation"] == ";GPU-1,NVIDIA,8000,20:;"
    assert isinstance(a["score"], float)
    assert b == {
        "fit": False,
        "score": 0.0,
        "reason": "1/1 CardNotHealth",
        "reasons": {"CardNotHealth": 1},
        "containers": [],
        "annotation": "",
    }


def test_nothing_fits_exits_1_with_reasons(app: typer.Typer, tmp_path: Path) -> None:
    nodes = [
        {
            "name": "a",
            "devices": [device(0, used=1, usedmem=1, usedcores=1), device(1)],
            "annotations": {"hami.io/device-cordon": "GPU-1"},
        }
    ]
    cluster, pod = write(tmp_path, nodes, gpu_pod({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100}))
    code, out, _ = run(app, "--cluster", cluster, "--pod", pod, "--json")
    assert code == 1
    report = json.loads(out)
    assert report["chosen"] is None
    assert report["nodes"]["a"]["reason"] == "1/2 CardCordoned, 1/2 CardInsufficientMemory"


def test_human_table(app: typer.Typer, tmp_path: Path) -> None:
    nodes = [
        {"name": "fits", "devices": [device(0)]},
        {"name": "full", "devices": [device(0, count=1, used=1)]},
    ]
    cluster, pod = write(tmp_path, nodes, gpu_pod({"nvidia.com/gpumem": 100}))
    code, out, _ = run(app, "--cluster", cluster, "--pod", pod)
    assert code == 0
    assert "chosen node fits" in out
    assert "1/1 CardTimeSlicingExhausted" in out
    assert "GPU-0(100MiB,0%)" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[3:]}
    assert rows["fits"][1:3] == ["*yes", f"{float(rows['fits'][2]):.2f}"]
    assert rows["full"][1:3] == ["no", "-"]  # a node that does not fit has no score to rank by


def test_examples_directory_works(app: typer.Typer) -> None:
    code, out, _ = run(
        app, "--cluster", str(EXAMPLES / "cluster.json"), "--pod", str(EXAMPLES / "pod-small.yaml"), "--json"
    )
    assert code == 0 and json.loads(out)["chosen"]
    code, out, _ = run(
        app, "--cluster", str(EXAMPLES / "cluster.json"), "--pod", str(EXAMPLES / "pod-exclusive.yaml")
    )
    assert code == 1
    assert out.startswith("pod default/exclusive-*: fits no node"), out  # generateName: no name yet


BAD_CLUSTERS = [
    ({"nodes": [{"name": "a", "devices": [device(0, devmem="24GB")]}]}, "nodes[0].devices[0].devmem"),
    ({"nodes": [{"name": "a", "devices": [device(0, usedmem=-1)]}]}, "nodes[0].devices[0].usedmem"),
    ({"nodes": [{"name": "a", "devices": [device(0, health="yes")]}]}, "nodes[0].devices[0].health"),
    ({"nodes": [{"name": "a", "devices": [{"id": "G"}]}]}, "nodes[0].devices[0].devmem"),
    ({"nodes": [{"devices": []}]}, "nodes[0].name"),
    ({"nodes": [{"name": "a", "annotations": {"k": 1}}]}, "nodes[0].annotations"),
    ({"nodes": [{"name": "a"}, {"name": "a"}]}, "duplicate"),
    ({"nodes": {}}, "nodes"),
    ([], "cluster"),
]


@pytest.mark.parametrize(("cluster", "field"), BAD_CLUSTERS)
def test_bad_cluster_names_the_field_and_exits_2(
    app: typer.Typer, tmp_path: Path, cluster: object, field: str
) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cluster))
    _, pod = write(tmp_path, [], gpu_pod({"nvidia.com/gpu": 1}))
    code, out, err = run(app, "--cluster", str(path), "--pod", pod)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and field in err


@pytest.mark.parametrize(
    ("pod", "field"),
    [
        (gpu_pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "16Gi"}), "nvidia.com/gpumem"),
        (gpu_pod({"nvidia.com/gpu": "two"}), "nvidia.com/gpu"),
        (
            gpu_pod({"nvidia.com/gpu": 1}, {"hami.io/device-scoring-weights": "slot=1"}),
            "device-scoring-weights",
        ),
        ({"spec": {"containers": 5}}, "spec.containers"),
    ],
)
def test_bad_pod_names_the_field_and_exits_2(
    app: typer.Typer, tmp_path: Path, pod: dict[str, object], field: str
) -> None:
    cluster, manifest = write(tmp_path, [{"name": "a", "devices": [device(0)]}], pod)
    code, _, err = run(app, "--cluster", cluster, "--pod", manifest)
    assert code == 2 and err.count("\n") == 1 and field in err


@pytest.mark.parametrize(
    ("name", "content", "option"),
    [
        ("missing", None, "--cluster"),
        ("notjson", "{nodes:", "--cluster"),
    ],
)
def test_unreadable_cluster_file(
    app: typer.Typer, tmp_path: Path, name: str, content: str | None, option: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    _, pod = write(tmp_path, [], gpu_pod({"nvidia.com/gpu": 1}))
    code, _, err = run(app, "--cluster", str(path), "--pod", pod)
    assert code == 2 and option in err and err.count("\n") == 1


@pytest.mark.parametrize("content", [None, "a: [b", "- just\n- a list\n"])
def test_unreadable_pod_file(app: typer.Typer, tmp_path: Path, content: str | None) -> None:
    cluster, _ = write(tmp_path, [], {})
    path = tmp_path / "bad.yaml"
    if content is not None:
        path.write_text(content)
    code, _, err = run(app, "--cluster", cluster, "--pod", str(path))
    assert code == 2 and "--pod" in err and err.count("\n") == 1


def test_unknown_fields_are_ignored_and_missing_ones_default(app: typer.Typer, tmp_path: Path) -> None:
    # No count (split 10), no health (healthy), no usage (0); unknown keys at every level.
    nodes = [{"name": "a", "zone": "z1", "devices": [{"id": "GPU-0", "devmem": 1000, "vendor": "x"}]}]
    cluster = tmp_path / "c.json"
    cluster.write_text(json.dumps({"nodes": nodes, "generated": "2024-01-01"}))
    _, pod = write(tmp_path, [], gpu_pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 100}))
    code, out, _ = run(app, "--cluster", str(cluster), "--pod", pod, "--json")
    assert code == 0 and json.loads(out)["nodes"]["a"]["fit"] is True
    ten_pods = {"nodes": [{"name": "a", "devices": [{"id": "GPU-0", "devmem": 1000, "used": 10}]}]}
    cluster.write_text(json.dumps(ten_pods))
    code, out, _ = run(app, "--cluster", str(cluster), "--pod", pod, "--json")
    assert code == 1 and json.loads(out)["nodes"]["a"]["reasons"] == {"CardTimeSlicingExhausted": 1}


@pytest.mark.parametrize(("option", "value"), [("--node-policy", "fastest"), ("--gpu-policy", "binpack,best"),
                                               ("--gpu-policy", " , ")])
def test_unknown_default_policy_is_refused_naming_the_option(
    app: typer.Typer, tmp_path: Path, option: str, value: str
) -> None:
    cluster, pod = write(tmp_path, [{"name": "a", "devices": [device(0)]}], gpu_pod({"nvidia.com/gpu": 1}))
    code, out, err = run(app, "--cluster", cluster, "--pod", pod, option, value)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith(f"error: {option}")


def test_known_policies_are_accepted(app: typer.Typer, tmp_path: Path) -> None:
    cluster, pod = write(tmp_path, [{"name": "a", "devices": [device(0)]}], gpu_pod({"nvidia.com/gpu": 1}))
    code, _, _ = run(app, "--cluster", cluster, "--pod", pod, "--node-policy", "spread", "--gpu-policy",
                     "binpack, numa")
    assert code == 0


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ({"name": "p", "annotations": {"hami.io/gpu-scheduler-policy": 5}}, "metadata.annotations"),
        ({"name": 7}, "metadata.name"),
        ({"name": "p", "namespace": ["ns"]}, "metadata.namespace"),
    ],
)
def test_wrong_metadata_types_name_the_field_and_exit_2(
    app: typer.Typer, tmp_path: Path, metadata: dict[str, object], field: str
) -> None:
    pod = {**gpu_pod({"nvidia.com/gpu": 1}), "metadata": metadata}
    cluster, manifest = write(tmp_path, [{"name": "a", "devices": [device(0)]}], pod)
    code, _, err = run(app, "--cluster", cluster, "--pod", manifest)
    assert code == 2 and err.count("\n") == 1 and field in err


@pytest.mark.parametrize("option", ["--cluster", "--pod"])
def test_absurdly_nested_input_is_a_one_line_error(app: typer.Typer, tmp_path: Path, option: str) -> None:
    cluster, pod = write(tmp_path, [{"name": "a", "devices": [device(0)]}], gpu_pod({"nvidia.com/gpu": 1}))
    nested = tmp_path / "nested.json"
    nested.write_text("[" * 100_000)
    paths = {"--cluster": cluster, "--pod": pod, option: str(nested)}
    code, _, err = run(app, "--cluster", paths["--cluster"], "--pod", paths["--pod"])
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: {option}")
