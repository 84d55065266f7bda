"""The images and docker-compose.yml, for real, with podman (marker ``image``).

As a user would: ``scripts/image`` builds the images; every service answers ``--help`` in them;
the production image holds no simulator and runs as an unprivileged user; ``docker-compose.yml``
as committed comes up under podman-compose, every service turns healthy, GPU pods submitted
through the API server the stack publishes run with the slices they asked for (annotations,
and what the device plugin's Allocate handed each container), the monitor and extender answer on
their published ports, and everything is torn down, also when a step fails.

Skipped, saying why, where podman cannot run here (`scripts/image setup` installs it with apt).
Slow on a fresh machine (the base image and the wheels are made once), seconds when built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from podmanstack import IMAGE, ROOT, SIM_IMAGE, ComposeStack, build_images, in_image, run, unusable

from shared.annotations import BIND_PHASE, DEVICES_ALLOCATED, decode_pod_devices

_why = unusable()
pytestmark = [
    pytest.mark.image,
    pytest.mark.timeout(1800),  # a fresh machine makes the base image and every wheel first
    pytest.mark.skipif(_why is not None, reason=_why or ""),
]

PRODUCTION_COMMANDS = ("webhook", "scheduler", "node-agent", "monitor", "dashboard", "tap")
SIM_COMMANDS = ("sim-control", "sim-kube-scheduler", "sim-nodes")
ALL_COMMANDS = PRODUCTION_COMMANDS + SIM_COMMANDS
SIMULATOR_PACKAGE = "gpubus_local"
LONG_RUNNING = {"nats", "control", "kube-scheduler", "webhook", "scheduler", "nodes", "dashboard"}
#: example -> (GPUs per container, MiB per GPU, % of SMs per GPU), as its manifest asks.
EXAMPLES = {"pod-shared-memory.yaml": (1, 3000, 30), "pod-multi-gpu.yaml": (2, 20480, 50)}


@pytest.fixture(scope="module")
def images() -> str:
    return build_images()


@pytest.fixture(scope="module")
def helps(images: str) -> dict[str, dict[str, dict[str, Any]]]:
    """image -> command -> ``gpubus <command> --help``'s exit code and output, run side by side in one
    container of the image (each start costs seconds; the commands run as in containers of their own)."""
    script = ("import json, subprocess, sys; "
              "runs = {c: subprocess.Popen(['gpubus', c, '--help'], stdout=-1, stderr=-1, text=True) "
              "for c in sys.argv[1:]}; "
              "print(json.dumps({c: dict(zip(('out', 'err'), p.communicate()), rc=p.returncode) "
              "for c, p in runs.items()}))")
    found = {}
    for image, commands in ((IMAGE, PRODUCTION_COMMANDS), (SIM_IMAGE, ALL_COMMANDS)):
        done = in_image(image, "-c", script, *commands, entrypoint="python")
        assert done.returncode == 0, done.stderr
        found[image] = json.loads(done.stdout)
    return found


@pytest.mark.parametrize(("image", "command"), [*((IMAGE, c) for c in PRODUCTION_COMMANDS),
                                                *((SIM_IMAGE, c) for c in ALL_COMMANDS)])
def test_each_service_answers_help_in_each_image(helps: dict[str, dict[str, dict[str, Any]]], image: str,
                                                 command: str) -> None:
    done = helps[image][command]
    assert done["rc"] == 0, done["err"]
    assert f"gpubus {command}" in done["out"]


def test_production_image_has_no_simulator_and_runs_unprivileged(images: str) -> None:
    imported = in_image(IMAGE, "-c", f"import {SIMULATOR_PACKAGE}", entrypoint="python")
    assert imported.returncode == 1 and "ModuleNotFoundError" in imported.stderr
    assert in_image(SIM_IMAGE, "-c", f"import {SIMULATOR_PACKAGE}", entrypoint="python").returncode == 0
    for image in (IMAGE, SIM_IMAGE):
        assert in_image(image, "-u", entrypoint="id").stdout.strip() == "10001"


def test_script_reports_each_image_with_its_size(images: str) -> None:
    reported = dict(line.split()[1:3] for line in images.splitlines() if line.startswith("image: localhost/"))
    assert set(reported) >= {IMAGE, SIM_IMAGE}
    assert all(size[0].isdigit() for size in reported.values())


@pytest.fixture(scope="module")
def stack(images: str) -> Iterator[ComposeStack]:
    stack = ComposeStack(project=f"gpubus-test-{os.getpid()}")
    try:
        up = stack.compose("up", "-d")
        assert up.returncode == 0, f"{up.stdout}\n{up.stderr[-3000:]}"
        stack.wait_healthy(LONG_RUNNING, one_shot={"certs"}, timeout=300)
        yield stack
    finally:
        stack.down()


@pytest.fixture(scope="module")
def kubeconfig(stack: ComposeStack, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kubeconfig the stack writes, pointed at the API server's published port."""
    control = stack.containers()["control"].name
    written = run("podman", "exec", control, "cat", "/state/kubeconfig")
    assert written.returncode == 0, written.stderr
    config = yaml.safe_load(written.stdout)
    [cluster] = config["clusters"]
    assert cluster["cluster"]["server"] == "http://control:17000"  # what the other containers use
    cluster["cluster"]["server"] = f"http://127.0.0.1:{stack.ports['GPUBUS_API_PORT']}"
    path = tmp_path_factory.mktemp("compose") / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def _api(stack: ComposeStack, path: str) -> Any:
    request = urllib.request.Request(f"http://127.0.0.1:{stack.ports['GPUBUS_API_PORT']}{path}",
                                     headers={"Authorization": "Bearer gpubus-sim"})
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return json.loads(body) if path.endswith(("pods", "nodes")) else body.decode()


def test_compose_stack_has_the_simulated_gpu_nodes(stack: ComposeStack) -> None:
    nodes = _api(stack, "/api/v1/nodes")["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == [f"node-{i}" for i in range(1, 5)]
    assert all(n["status"]["allocatable"]["nvidia.com/gpu"] == "40" for n in nodes)  # 4 GPUs x split 10


@pytest.mark.parametrize("example", EXAMPLES)
def test_gpu_pods_submitted_through_the_published_api_run_with_their_slices(
        stack: ComposeStack, kubeconfig: Path, example: str) -> None:
    submitted = subprocess.run(
        [sys.executable, "-m", "gpubus", "submit", str(ROOT / "examples" / example), "--count", "3",
         "--kubeconfig", str(kubeconfig), "--timeout", "90"],
        capture_output=True, text=True, timeout=120, check=False)
    assert submitted.returncode == 0, stack.report(f"submit failed:\n{submitted.stdout}\n{submitted.stderr}")
    assert "Running 3" in submitted.stdout
    gpus, memory, cores = EXAMPLES[example]
    prefix = yaml.safe_load((ROOT / "examples" / example).read_text())["metadata"]["generateName"]
    pods = [p for p in _api(stack, "/api/v1/namespaces/default/pods")["items"]
            if p["metadata"]["name"].startswith(prefix)]
    assert len(pods) == 3
    for pod in pods:
        assert pod["status"]["phase"] == "Running"
        annotations = pod["metadata"]["annotations"]
        assert annotations[BIND_PHASE] == "success"
        [container] = decode_pod_devices(annotations[DEVICES_ALLOCATED])
        assert [(d.usedmem, d.usedcores) for d in container] == [(memory, cores)] * gpus
        log = _api(stack, f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}/log")
        limits = [line for line in log.splitlines() if "memory limit" in line]
        assert len(limits) == gpus, log
        wanted = (f"memory limit {memory} MiB", f"SM limit {cores} %")
        assert all(all(w in line for w in wanted) for line in limits), log


def test_monitor_and_extender_answer_on_their_published_ports(stack: ComposeStack) -> None:
    for variable in ("GPUBUS_METRICS_PORT", "GPUBUS_EXTENDER_PORT"):
        url = f"http://127.0.0.1:{stack.ports[variable]}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200 and b"# TYPE" in response.read(), variable
