"""The user's path: ``gpubus up`` (Ctrl-C, busy ports), ``gpubus submit`` of every example, ``get pods``.

The commands run as real subprocesses against a stack started through the same code as ``up``.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from e2e_harness import E2E, gpu_pod, running_stack
from kubectl import kubectl, needs_kubectl
from pod_manifests import directive_keys

from gpubus.up_dir import NATS_URL_FILE
from gpubus_local.stack import Stack, StackError, StackSpec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RUNNABLE = ["pod-shared-memory.yaml", "pod-percentage-memory.yaml", "pod-exclusive-card.yaml",
            "pod-multi-gpu.yaml", "pod-gpu-type.yaml", "pod-gpu-uuid.yaml", "pod-numa-bind.yaml"]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def e2e(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[E2E]:
    async with running_stack(Path(tmp_path_factory.mktemp("cli")), nodes=2, devices="4xA100-80GB") as handle:
        yield handle


async def gpubus(*args: str, timeout: float = 90) -> tuple[int, str, str]:  # noqa: ASYNC109
    pipe = asyncio.subprocess.PIPE
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "gpubus", *args,
                                                stdout=pipe, stderr=pipe)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.parametrize("example", RUNNABLE)
async def test_every_example_runs_through_gpubus_submit(e2e: E2E, example: str) -> None:
    code, out, err = await gpubus("submit", str(EXAMPLES / example),
                                  "--kubeconfig", str(e2e.stack.kubeconfig), "--timeout", "60")
    assert code == 0, out + err
    assert "Running 1" in out or "Succeeded 1" in out, out
    assert "submit->Running" in out


async def test_an_example_submitted_twice_makes_two_pods_not_a_conflict(e2e: E2E) -> None:
    for _ in range(2):
        code, out, err = await gpubus("submit", str(EXAMPLES / "pod-small.yaml"),
                                      "--kubeconfig", str(e2e.stack.kubeconfig), "--timeout", "60")
        assert code == 0 and "Running 1" in out, out + err


async def test_submit_count_summarises_phases_and_latency(e2e: E2E) -> None:
    code, out, err = await gpubus("submit", str(EXAMPLES / "pod-small.yaml"), "--count", "6",
                                  "--kubeconfig", str(e2e.stack.kubeconfig))
    assert code == 0, out + err
    assert "Running 6" in out and "p50" in out and "p99" in out, out


async def test_the_pod_that_cannot_fit_is_reported_pending_with_the_reason(e2e: E2E) -> None:
    code, out, _ = await gpubus("submit", str(EXAMPLES / "pod-cannot-fit.yaml"),
                                "--kubeconfig", str(e2e.stack.kubeconfig), "--timeout", "60")
    assert code == 1
    assert "Pending 1" in out and "Unschedulable" in out, out
    code, out, _ = await gpubus("explain", "--cluster", str(EXAMPLES / "cluster.json"),
                                "--pod", str(EXAMPLES / "pod-cannot-fit.yaml"))
    assert code == 1 and "CardInsufficientMemory" in out, out


@needs_kubectl
async def test_kubectl_describe_says_why_a_pod_is_pending_and_get_events_lists_it(e2e: E2E) -> None:
    await e2e.create(gpu_pod("way-too-big", mem=100_000, cores=10))
    await e2e.wait_event("way-too-big", "FailedScheduling")
    code, out, err = await kubectl(e2e.stack.kubeconfig, "describe", "pod", "way-too-big")
    assert code == 0, err
    [row] = [line for line in out.split("Events:", 1)[1].splitlines() if "FailedScheduling" in line]
    assert row.split()[0] == "Warning" and "gpubus-scheduler" in row
    assert "0/2 nodes are available: " in row and "CardInsufficientMemory" in row, out
    code, out, err = await kubectl(e2e.stack.kubeconfig, "get", "events", "--field-selector",
                                   "involvedObject.name=way-too-big")
    assert code == 0 and "pod/way-too-big" in out and "CardInsufficientMemory" in out, out + err
    await e2e.kube.delete_pod("default", "way-too-big")
    await e2e.check_invariants()


@needs_kubectl
async def test_kubectl_apply_run_and_reapply_work_against_the_stack(e2e: E2E) -> None:
    """A user's kubectl session: apply an example (validated server-side), run a pod without GPUs
    (the stand-in's default-scheduler profile places it), re-apply with a new image (a strategic
    merge patch): the GPU limits and the running slice stay as they were."""
    config = e2e.stack.kubeconfig
    example = await asyncio.to_thread((EXAMPLES / "pod-shared-memory.yaml").read_text)
    # apply needs a name; the example has a generateName (a new pod per submit)
    manifest = re.sub(r"(?m)^  generateName: .*$", "  name: kubectl-shared", example, count=1)
    code, out, err = await kubectl(config, "apply", "-f", "-", stdin=manifest)
    assert code == 0 and "pod/kubectl-shared created" in out, out + err
    code, out, err = await kubectl(config, "run", "plain-nginx", "--image=nginx", "--restart=Never")
    assert code == 0, err
    await e2e.wait_phase(["kubectl-shared", "plain-nginx"], {"Running", "Succeeded"})
    before = await e2e.kube.get_pod("default", "kubectl-shared")
    assert before is not None
    code, out, err = await kubectl(config, "apply", "-f", "-",
                                   stdin=manifest.replace("image: ", "image: registry.local/", 1))
    assert code == 0 and "pod/kubectl-shared configured" in out, out + err
    after = await e2e.kube.get_pod("default", "kubectl-shared")
    assert after is not None
    [was], [now] = before["spec"]["containers"], after["spec"]["containers"]
    assert now["image"].startswith("registry.local/") and now["resources"] == was["resources"]
    assert directive_keys(after) == []
    await e2e.check_invariants()


async def test_explain_against_a_snapshot_of_the_live_cluster_says_why(e2e: E2E, tmp_path: Path) -> None:
    await e2e.create(gpu_pod("holding", mem=30000, cores=40))
    await e2e.wait_phase(["holding"], {"Running"})
    code, out, err = await gpubus("snapshot", "--nats", e2e.stack.nats_url)
    assert code == 0, err
    live = json.loads(out)
    assert {n["name"] for n in live["nodes"]} == {"node-1", "node-2"}
    assert sum(d["usedmem"] for n in live["nodes"] for d in n["devices"]) >= 30000
    (tmp_path / "cluster.json").write_text(out)
    code, out, _ = await gpubus("explain", "--cluster", str(tmp_path / "cluster.json"),
                                "--pod", str(EXAMPLES / "pod-cannot-fit.yaml"))
    assert code == 1 and "node-1" in out and "CardInsufficientMemory" in out, out


async def test_get_pods_shows_node_and_gpu_slices(e2e: E2E) -> None:
    pod = EXAMPLES / "pod-percentage-memory.yaml"
    await gpubus("submit", str(pod), "--kubeconfig", str(e2e.stack.kubeconfig), "--namespace", "kube-public")
    code, out, _ = await gpubus("get", "pods", "--kubeconfig", str(e2e.stack.kubeconfig))
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "STATUS", "NODE", "GPU", "AGE"]
    row = next(r for r in rows if r.startswith("shared-memory"))  # submitted by the examples test
    assert "node-" in row and "3000MiB/30%" in row, row
    code, out, _ = await gpubus("get", "pods", "-A", "-o", "wide", "--kubeconfig", str(e2e.stack.kubeconfig))
    assert any(r.split()[0] == "kube-public" and r.split()[1].startswith("quarter-card-")
               and "20480MiB/25%" in r for r in out.splitlines()), out
    code, out, _ = await gpubus("get", "pods", "-o", "json", "--kubeconfig", str(e2e.stack.kubeconfig))
    assert any(p["metadata"]["name"].startswith("shared-memory-") for p in json.loads(out)["items"])
    await e2e.check_invariants()


async def test_a_second_stack_on_the_same_ports_says_which_port_is_busy(e2e: E2E, tmp_path: Path) -> None:
    assert e2e.stack.ports is not None
    spec = StackSpec(data_dir=tmp_path, nodes=1, port_base=e2e.stack.ports.apiserver, nats_port=0)
    with pytest.raises(StackError, match=rf"busy: apiserver {e2e.stack.ports.apiserver}"):
        await Stack(spec).start()


async def test_gpubus_up_prints_where_everything_is_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpubus", "up", "--nodes", "1", "--devices", "1xA100-80GB", "--nats-port", "0",
        "--port-base", "0", "--data-dir", str(tmp_path), "--single-node-filter",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    seen: list[str] = []
    async with asyncio.timeout(90):
        while not any("Ctrl-C stops everything" in line for line in seen):
            line = (await proc.stdout.readline()).decode()
            assert line, "gpubus up ended early:\n" + "".join(seen)
            seen.append(line)
    text = "".join(seen)
    for what in ("NATS", "kubeconfig", "webhook", "extender", "monitor metrics", "dashboard", " tap",
                 "HAMi single-node filter"):
        assert what in text, text
    hints = printed_hints(text)
    # The hints run as printed: this stack's NATS is on a port nobody told them (the data dir says it).
    code, out, err = await run_printed([*hints["tap"], "--all", "--count", "1", "--timeout", "30"])
    assert code == 0 and len(out.splitlines()) == 1, out + err
    code, out, err = await run_printed(hints["snapshot"])
    assert code == 0 and "nodes" in json.loads(out), err
    proc.send_signal(signal.SIGINT)
    rest, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, rest.decode()
    assert "stopped" in rest.decode()
    assert not (tmp_path / NATS_URL_FILE).exists(), "the stopped stack's NATS URL is still recorded"


def printed_hints(text: str) -> dict[str, list[str]]:
    """The commands under ``try:``, each by its sub-command (``tap``, ``snapshot``, ``kubectl`` ...)."""
    lines = [shlex.split(line) for line in text.split("\ntry:\n", 1)[1].splitlines() if line.startswith("  ")]
    words = ("tap", "submit", "get", "snapshot", "kubectl")
    return {next(w for w in argv if w in words): argv for argv in lines}


async def run_printed(argv: list[str]) -> tuple[int, str, str]:
    pipe = asyncio.subprocess.PIPE
    proc = await asyncio.create_subprocess_exec(*argv, stdout=pipe, stderr=pipe)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.mark.parametrize(("kubeconfig", "message"), [
    ("/nonexistent/kubeconfig", "no kubeconfig at /nonexistent/kubeconfig: start `gpubus up`"),
    ("not-a-kubeconfig", "cannot use kubeconfig"),
])
async def test_submit_and_get_explain_a_missing_or_broken_kubeconfig(tmp_path: Path, kubeconfig: str,
                                                                    message: str) -> None:
    path = Path(kubeconfig) if kubeconfig.startswith("/") else tmp_path / kubeconfig
    if not kubeconfig.startswith("/"):
        path.write_text("foo: 1\n")
    for args in (("submit", str(EXAMPLES / "pod-small.yaml")), ("get", "pods")):
        code, _, err = await gpubus(*args, "--kubeconfig", str(path))
        assert code in (1, 2) and message in err and "Traceback" not in err, err
