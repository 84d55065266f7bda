"""Benchmark B3: sustained pods/s through the whole pipeline, and submit->Running latency.

Starts the ``gpubus up`` stack (100 simulated nodes x 8 A100-80GB by default), then creates N
short pods with open-loop arrivals at ``--rate`` pods/s (each create is sent at its scheduled
time whether or not earlier ones finished). A pod watch timestamps each pod's Running (or an
already-Succeeded) phase. Reports: achieved throughput, p50/p99 submit->Running, how many pods
did not start, the CPU the simulator (API server + kube-scheduler stand-in + the kubelets' process)
and the services used per started pod, gpubus's own (webhook + scheduler + node-agents, which run in
a process of their own here) on one line, and whether any device was ever over-committed (replay of
every event).

Pod mix (reference/performance.md §5): 60 % 1 x (8 GiB, 20 %), 30 % 2 x (16 GiB, 30 %),
10 % 4 x whole GPU; ``--mix small`` uses only the first kind.

    .venv/bin/python bench/e2e.py --pods 20000 --rate 400        # saturation
    .venv/bin/python bench/e2e.py --pods 9000 --rate 150         # latency at 150 pods/s
    .venv/bin/python bench/e2e.py --single-node-filter           # HAMi mode: no /prioritize
    .venv/bin/python bench/e2e.py --smoke                        # 2 nodes, 20 pods: proves it runs

``--control-plane kubernetes`` runs the same load on the real control plane (``scripts/kube-build``):
etcd, kube-apiserver, kube-controller-manager, kube-scheduler calling the extender, and per node a
real kubelet on the fake CRI runtime with a node-agent (:mod:`gpubus_local.kube.stack`). Each
process's CPU is reported per started pod, raw and net of idle; kubelets, fake runtimes and
node-agents summed.

    .venv/bin/python bench/e2e.py --control-plane kubernetes --nodes 8 --pods 3000 --rate 150
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import aiohttp
import uvloop
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpubus.pods import percentile
from gpubus_local.kube.binaries import find_binaries
from gpubus_local.kube.stack import KubeStack, KubeStackSpec
from gpubus_local.natsserver import EmbeddedNats, free_port
from gpubus_local.stack import Stack, StackSpec
from gpubus_local.stack_check import replay_overcommit
from shared.bus import STREAM, Bus, BusSettings
from shared.codec import to_wire
from shared.events import Event
from shared.kube import KubeClient, list_and_watch_pods
from shared.kube_types import Pod

_CLK = os.sysconf("SC_CLK_TCK")
#: mix -> [(share, GPUs, MiB per GPU or None for the whole card, % cores)]
MIX: dict[str, list[tuple[float, int, int | None, int]]] = {
    "standard": [(0.6, 1, 8192, 20), (0.3, 2, 16384, 30), (0.1, 4, None, 100)],
    "small": [(1.0, 1, 8192, 20)]}


#: Label of the pods the bench submits; the observer counts only these.
BENCH_LABEL = "gpubus.io/bench"


def make_pod(i: int, rng: random.Random, mix: str, duration: str) -> dict[str, Any]:
    r, acc = rng.random(), 0.0
    share, gpus, mem, cores = MIX[mix][-1]
    for share, gpus, mem, cores in MIX[mix]:  # noqa: B007 - the loop picks the kind
        acc += share
        if r <= acc:
            break
    limits: dict[str, Any] = {"nvidia.com/gpu": gpus, "nvidia.com/gpucores": cores}
    if mem is not None:
        limits["nvidia.com/gpumem"] = mem
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"b-{i}", "namespace": "default", "labels": {BENCH_LABEL: "e2e"},
                         "annotations": {"gpubus.io/sim-duration": duration}},
            # Never: a kubelet restarts a container that ended under the default Always
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}]}}


def cpu_seconds(pid: int | None) -> float:
    """utime + stime of one process (threads included) from /proc, in seconds."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _CLK


class Observer:
    """Running timestamps per pod name, from one pod watch.

    The watch selects ``status.phase!=Pending`` server-side, so this client decodes about two
    events per pod (Running, Succeeded) instead of every write the pipeline makes to it, and only the
    bench's own pods (:data:`BENCH_LABEL`): the stack's node pods (per-node identity) are not load.
    """

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        """When the API server marked the pod scheduled (its PodScheduled condition, whole seconds)."""
        self.failed: dict[str, str] = {}
        self.synced = asyncio.Event()

    async def follow(self, kube: KubeClient) -> None:
        async for event in list_and_watch_pods(kube, field_selector="status.phase!=Pending",
                                               label_selector=BENCH_LABEL, synced=self.synced):
            pod = cast(dict[str, Any], event["object"])
            name, status = pod["metadata"]["name"], pod.get("status") or {}
            phase = status.get("phase")
            if phase in ("Running", "Succeeded") and name not in self.started:
                self.started[name] = time.time()
                for condition in status.get("conditions") or []:
                    if condition.get("type") == "PodScheduled" and condition.get("lastTransitionTime"):
                        self.bound[name] = rfc3339_seconds(condition["lastTransitionTime"])
            elif phase == "Failed":
                self.failed[name] = f"{status.get('reason')}: {status.get('message')}"


def rfc3339_seconds(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def submit_open_loop(kube: KubeClient, pods: list[dict[str, Any]], rate: float,
                           submitted: dict[str, float], errors: list[str]) -> float:
    """Send each create at t0 + i/rate; returns t0."""
    limit = asyncio.Semaphore(512)

    async def create(pod: dict[str, Any]) -> None:
        async with limit:
            submitted[pod["metadata"]["name"]] = time.time()
            try:
                await kube.create_pod("default", cast(Pod, pod))
            except Exception as e:
                errors.append(repr(e)[:200])

    t0 = time.monotonic()
    tasks = []
    for i, pod in enumerate(pods):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # the arrival schedule itself, not a wait for an outcome
        tasks.append(asyncio.create_task(create(pod)))
    await asyncio.gather(*tasks)
    return t0


async def replay_events(url: str) -> list[dict[str, Any]]:
    bus = await Bus.connect(BusSettings(url=url, name="bench-replay"), source="bench")
    try:
        total = (await bus.js.stream_info(STREAM)).state.messages
        events: list[dict[str, Any]] = []
        done = asyncio.Event()

        async def on_event(e: Event) -> None:
            body = to_wire(e)
            body["kind"] = e.KIND
            events.append(body)
            if len(events) >= total:
                done.set()

        await bus.subscribe("gpubus.>", on_event, deliver="all")
        await asyncio.wait_for(done.wait(), 300)
        return events
    finally:
        await bus.close()


async def main(args: argparse.Namespace) -> None:
    data = Path(args.data_dir or tempfile.mkdtemp(prefix="gpubus-bench-"))
    keep = args.data_dir is not None or args.profile  # else the temp dir goes: its NATS store is 100-200 MB
    try:
        if args.control_plane == "kubernetes":
            await main_kube(args, data)
        else:
            await main_sim(args, data)
    finally:
        if not keep:
            shutil.rmtree(data, ignore_errors=True)


async def main_sim(args: argparse.Namespace, data: Path) -> None:
    """The stand-in control plane (``gpubus up``): one process per role."""
    # the stand-ins' Normal events (Scheduled, Started: two API writes a pod, ~0.75 ms of simulator
    # CPU) are off unless --normal-events; Warnings (FailedScheduling, admission errors) stay on
    events = () if args.normal_events else ("--no-normal-events",)
    # the node-agents (a process of their own) heartbeat every 30 s, the kubelets' monitor reads every 5 s
    extra: dict[str, tuple[str, ...]] = {"nodes": ("--monitor-interval", "5", *events),
                                         "agents": ("--heartbeat", "30"), "kube-scheduler": events}
    if args.profile:
        extra = {"nodes": (*extra["nodes"], "--profile", str(data / "nodes.prof")),
                 "agents": (*extra["agents"], "--profile", str(data / "agents.prof")),
                 "control": ("--profile", str(data / "control.prof")),
                 "kube-scheduler": (*extra["kube-scheduler"], "--profile", str(data / "kube-scheduler.prof"))}
    spec = StackSpec(data_dir=data, nodes=args.nodes, devices=args.devices, nats_port=0, port_base=0,
                     pod_duration=args.duration, log_level="warning", ready_timeout_s=300, extra_args=extra,
                     single_node_filter=args.single_node_filter, agents_apart=True,
                     nats_args=("-m", str(monitor_port := free_port())),
                     node_identity=args.node_identity)
    stack = Stack(spec)
    t = time.monotonic()
    await stack.start()
    print(f"stack up: {args.nodes} nodes x {args.devices} in {time.monotonic() - t:.1f}s "
          f"(data {data}{'' if args.data_dir else ', removed at the end; --data-dir keeps it'}); "
          f"stand-in events: {'all' if args.normal_events else 'Warnings only (--normal-events: all)'}")
    try:
        pids = {**{n: [c.pid] for n, c in stack.children.items()},
                "nats": [stack.nats.pid if isinstance(stack.nats, EmbeddedNats) else None]}
        assert stack.ports is not None
        await measure(args, stack.kubeconfig, pids, monitor_port, stack.nats_url,
                      f"http://127.0.0.1:{stack.ports.scheduler}/metrics")
    finally:
        await stack.stop()


def kube_pids(stack: KubeStack) -> dict[str, list[int | None]]:
    """Process ids by what the report calls them: each control-plane component and gpubus service
    on its own, the kubelets, fake runtimes and node-agents each summed."""
    assert stack.plane is not None and stack.nats is not None
    groups: dict[str, list[int | None]] = {n: [c.pid] for n, c in stack.plane.children.items()}
    groups["kubelets"] = [n.kubelet.pid for n in stack.plane.nodes.values()]
    groups["fake-cris"] = [n.runtime.pid for n in stack.plane.nodes.values()]
    for name, child in stack.children.items():
        key = "agents" if name.startswith("node-agent-") else name
        groups.setdefault(key, []).append(child.pid)
    groups["nats"] = [stack.nats.pid]
    return groups


async def main_kube(args: argparse.Namespace, data: Path) -> None:
    """The real control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, real
    kubelets on the fake CRI runtime, gpubus installed by its Helm chart."""
    spec = KubeStackSpec(data_dir=data, nodes=args.nodes, devices=args.devices, log_level="warning",
                         ready_timeout_s=300, binaries=await asyncio.to_thread(find_binaries, build=False),
                         nats_args=("-m", str(monitor_port := free_port())))
    t = time.monotonic()
    async with KubeStack(spec) as stack:
        print(f"stack up (real control plane): {args.nodes} kubelets x {args.devices} in "
              f"{time.monotonic() - t:.1f}s (data {data}{'' if args.data_dir else ', removed at the end'})")
        await measure(args, stack.kubeconfig, kube_pids(stack), monitor_port, stack.nats_url,
                      f"http://127.0.0.1:{stack.ports.schedulers[0]}/metrics")


async def measure(args: argparse.Namespace, kubeconfig: Path,  # noqa: PLR0917
                  pids: dict[str, list[int | None]], monitor_port: int, nats_url: str, extender: str) -> None:
    """The load and every figure, the same on either control plane."""
    kube = await KubeClient.from_kubeconfig(kubeconfig)
    observer = Observer()
    watch = asyncio.create_task(observer.follow(kube))
    try:
        await asyncio.wait_for(observer.synced.wait(), 60)
        rng = random.Random(7)
        pods = [make_pod(i, rng, args.mix, args.duration) for i in range(args.pods)]
        print(f"load average before the load: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        idle_msgs0, idle_t0 = await nats_messages(monitor_port), time.monotonic()
        idle = await idle_cpu(pids, args.idle_s)
        idle_msgs1, idle_s = await nats_messages(monitor_port), time.monotonic() - idle_t0
        print(idle_messages_line(idle_msgs0, idle_msgs1, idle_s))
        if args.idle_only:
            print(f"idle CPU ms/s ({args.idle_s:.0f}s): "
                  + ", ".join(f"{n} {v * 1000:.1f}" for n, v in sorted(idle.items())))
            return
        cpu0, msgs0 = {n: group_cpu(group) for n, group in pids.items()}, await nats_messages(monitor_port)
        msgs_t0 = time.monotonic()
        self0 = resource.getrusage(resource.RUSAGE_SELF)
        submitted: dict[str, float] = {}
        errors: list[str] = []
        wall0 = time.time()
        await submit_open_loop(kube, pods, args.rate, submitted, errors)
        offered_s = time.time() - wall0
        last, progress_at = -1, time.monotonic()
        while len(observer.started) + len(observer.failed) < len(submitted) - len(errors) \
                and time.monotonic() - progress_at < args.stall_s:
            if len(observer.started) != last:
                last, progress_at = len(observer.started), time.monotonic()
            await asyncio.sleep(0.2)
        wall = max(observer.started.values(), default=time.time()) - wall0
        cpu = {n: group_cpu(group) - cpu0[n] for n, group in pids.items()}
        messages = messages_line(msgs0, await nats_messages(monitor_port), len(observer.started),
                                 idle=(idle_msgs0, idle_msgs1, idle_s), window_s=time.monotonic() - msgs_t0)
        self1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu["bench"] = self1.ru_utime + self1.ru_stime - self0.ru_utime - self0.ru_stime
        report(args, submitted, observer, errors, offered_s, wall, cpu, idle)
        print(messages)
        print(f"load average after the load: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print("extender answers: " + await extender_answers(extender))
        events = await replay_events(nats_url)
        problems = replay_overcommit(events)
        print(f"over-commit check: {len(events)} events replayed, "
              f"{'0 over-commits' if not problems else f'{len(problems)} OVER-COMMITS: {problems[:3]}'}")
    finally:
        watch.cancel()
        await kube.close()


def group_cpu(pids: list[int | None]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


async def idle_cpu(pids: dict[str, list[int | None]], seconds: float) -> dict[str, float]:
    """CPU seconds a second each process burns with no pod in flight (timers, heartbeats, the 100
    node-agents' consumers in one process): the per-pod figures are also printed net of it."""
    if seconds <= 0:
        return dict.fromkeys(pids, 0.0)
    before = {n: group_cpu(group) for n, group in pids.items()}
    await asyncio.sleep(seconds)
    return {n: (group_cpu(group) - before[n]) / seconds for n, group in pids.items()}


async def extender_answers(url: str) -> str:
    """``verb outcome=count`` from the scheduler's decision counter (its ``/metrics`` at ``url``):
    how many binds failed and why."""
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        text = await response.text()
    counts, wait = [], {}
    for family in text_string_to_metric_families(text):
        if family.name == "gpubus_scheduler_decisions":
            counts += [f"{s.labels['verb']} {s.labels['outcome']}={s.value:.0f}"
                       for s in family.samples if s.name.endswith("_total") and s.value]
        elif family.name == "gpubus_scheduler_bind_pod_reads":
            counts += [f"bind read pod from {s.labels['source']}={s.value:.0f}"
                       for s in family.samples if s.name.endswith("_total") and s.value]
        elif family.name == "gpubus_scheduler_lease_wait_seconds":
            wait.update({s.name.rsplit("_", 1)[1]: s.value for s in family.samples
                         if s.name.endswith(("_sum", "_count"))})
    # a bind waits for its Allocate lease until the node's kubelet has run Allocate for the pod
    # bound before it with as many devices: the stand-in kubelets call it at once, real ones at admission
    leases = (f"; lease wait mean {wait['sum'] / wait['count'] * 1000:.0f} ms over {wait['count']:.0f} binds"
              if wait.get("count") else "")
    return (", ".join(sorted(counts)) or "none") + leases


async def nats_messages(port: int) -> dict[str, tuple[int, int]]:
    """Messages each client sent and received so far, by connection name, from nats-server's ``/connz``."""
    async with aiohttp.ClientSession() as session, \
            session.get(f"http://127.0.0.1:{port}/connz?limit=4096") as response:
        body = await response.json()
    counts: dict[str, tuple[int, int]] = {}
    for conn in body.get("connections") or []:
        sent, received = counts.get(conn.get("name") or "?", (0, 0))
        # the server's "in" is what the client sent it, its "out" what it delivered to the client
        counts[conn.get("name") or "?"] = (sent + conn["in_msgs"], received + conn["out_msgs"])
    return counts


#: Connection names of the processes whose NATS traffic the bench reports, as prefixes: with
#: per-node identity each node-agent has a connection of its own, ``gpubus-node-agent-<node>``.
_NATS_CLIENTS = {"scheduler": ("gpubus-scheduler",),
                 "node-agents": ("gpubus-sim-agents", "gpubus-node-agent-", "node-agent-"),
                 "kubelets+monitor": ("gpubus-sim-hosts",), "webhook": ("gpubus-webhook",)}


def _summed(counts: dict[str, tuple[int, int]], prefixes: tuple[str, ...]) -> tuple[int, int]:
    picked = [v for name, v in counts.items() if name.startswith(prefixes)]
    return sum(v[0] for v in picked), sum(v[1] for v in picked)


def messages_line(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], started: int,
                  idle: tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]], float] | None = None,
                  window_s: float = 0.0) -> str:
    """NATS messages per started pod, sent/received, of each process (a publish awaited for its ack
    is one sent and one received; acks of consumed messages count as sent). With ``idle`` (the idle
    window's counts before and after, and its seconds) and the load's ``window_s``, a second line
    nets out what the cluster sends with no pod in flight over the load's window: at thousands of
    nodes the inventory heartbeats alone are several messages a pod."""
    per_pod = max(started, 1)
    raw, net = [], []
    for label, prefixes in _NATS_CLIENTS.items():
        (sent0, received0), (sent1, received1) = _summed(before, prefixes), _summed(after, prefixes)
        sent, received = sent1 - sent0, received1 - received0
        raw.append(f"{label} {sent / per_pod:.1f}/{received / per_pod:.1f}")
        if idle is not None and idle[2] > 0:
            (isent0, irec0), (isent1, irec1) = _summed(idle[0], prefixes), _summed(idle[1], prefixes)
            scale = window_s / idle[2]
            net.append(f"{label} {(sent - (isent1 - isent0) * scale) / per_pod:.1f}/"
                       f"{(received - (irec1 - irec0) * scale) / per_pod:.1f}")
    line = "NATS messages per started pod, sent/received: " + ", ".join(raw)
    if net:
        line += f"\nNATS messages per started pod net of idle ({window_s:.1f}s of load): " + ", ".join(net)
    return line


def idle_messages_line(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]],
                       seconds: float) -> str:
    """NATS messages a second, sent/received, of each process and of every client together, with
    no pod in flight: what the cluster costs for merely existing (heartbeats, timers)."""
    if seconds <= 0:
        return "idle NATS messages/s: not measured (--idle-s 0)"
    parts = []
    for label, prefixes in {**_NATS_CLIENTS, "all clients": ("",)}.items():
        (sent0, received0), (sent1, received1) = _summed(before, prefixes), _summed(after, prefixes)
        parts.append(f"{label} {(sent1 - sent0) / seconds:.1f}/{(received1 - received0) / seconds:.1f}")
    return f"idle NATS messages/s over {seconds:.0f}s, sent/received: " + ", ".join(parts)


def steady_rate(starts: list[float]) -> str:
    """Pods/s between the 10th and the 90th percentile start: without the ramp-up and the tail (pods
    that waited for a backoff or a free whole GPU), which weigh on the sustained figure of a short run."""
    if len(starts) < 20:
        return ""
    starts = sorted(starts)
    lo, hi = len(starts) // 10, len(starts) * 9 // 10
    span = starts[hi] - starts[lo]
    return f"; steady {(hi - lo) / span:.0f} pods/s (10th -> 90th percentile start)" if span > 0 else ""


def split_latency(submitted: dict[str, float], observer: Observer) -> None:
    """submit->bound (admission, kube-scheduler, the extender's bind with its lease wait) and
    bound->Running (the kubelet), from the PodScheduled condition's time: whole seconds, so only
    figures of a second or more say anything."""
    names = [n for n in observer.bound if n in submitted]
    if not names:
        return
    bind = [observer.bound[n] - submitted[n] for n in names]
    run = [observer.started[n] - observer.bound[n] for n in names]
    print(f"  of which (1 s resolution) submit->bound p50 {percentile(bind, 50):.1f} s p99 "
          f"{percentile(bind, 99):.1f} s; bound->Running p50 {percentile(run, 50):.1f} s p99 "
          f"{percentile(run, 99):.1f} s")


def report(args: argparse.Namespace, submitted: dict[str, float], observer: Observer,  # noqa: PLR0917
           errors: list[str], offered_s: float, wall: float, cpu: dict[str, float],
           idle: dict[str, float]) -> None:
    lat = [observer.started[n] - t for n, t in submitted.items() if n in observer.started]
    started = len(lat)
    print(f"pods: {args.pods} offered at {args.rate:.0f}/s over {offered_s:.1f}s; started {started}, "
          f"failed {len(observer.failed)}, create errors {len(errors)}, never started "
          f"{args.pods - started - len(observer.failed) - len(errors)}")
    print(f"throughput: {started / wall:.0f} pods/s sustained (first submit -> last Running {wall:.1f}s)"
          + steady_rate([observer.started[n] for n in submitted if n in observer.started]))
    if lat:
        p50, p99 = percentile(lat, 50) * 1000, percentile(lat, 99) * 1000
        print(f"submit->Running: p50 {p50:.0f} ms  p99 {p99:.0f} ms  max {max(lat) * 1000:.0f} ms")
        split_latency(submitted, observer)
    if "control" in cpu:
        simulator_line(cpu, wall)
    else:
        plane = sum(cpu.get(n, 0) for n in KUBE_PLANE)
        print(f"CPU seconds over {wall:.1f}s: control plane {plane:.1f} = {plane / wall * 100:.0f}% "
              "of a core ("
              + ", ".join(f"{n} {cpu.get(n, 0):.1f}" for n in KUBE_PLANE) + "); gpubus "
              + ", ".join(f"{n} {v:.1f}" for n, v in sorted(cpu.items()) if n not in KUBE_PLANE))

    def per_pod(seconds: float) -> float:
        return seconds / max(started, 1) * 1000

    print("CPU ms per started pod: " + ", ".join(f"{n} {per_pod(v):.2f}" for n, v in sorted(cpu.items())))
    print("CPU ms per started pod net of idle: " + ", ".join(
        f"{n} {per_pod(max(v - idle.get(n, 0) * wall, 0)):.2f}" for n, v in sorted(cpu.items())))
    own = {n: per_pod(cpu.get(n, 0)) for n in ("webhook", "scheduler", "agents")}
    print(f"gpubus-owned CPU ms per started pod: {sum(own.values()):.2f} = webhook {own['webhook']:.2f} "
          f"+ scheduler {own['scheduler']:.2f} + node-agents {own['agents']:.2f}")
    print(f"idle CPU ms/s before the load ({args.idle_s:.0f}s): "
          + ", ".join(f"{n} {v * 1000:.1f}" for n, v in sorted(idle.items())))
    net = {n: per_pod(max(cpu.get(n, 0) - idle.get(n, 0) * wall, 0)) for n in own}
    print(f"gpubus-owned CPU ms per started pod net of idle: {sum(net.values()):.2f} = webhook "
          f"{net['webhook']:.2f} + scheduler {net['scheduler']:.2f} + node-agents {net['agents']:.2f}")
    for reason in sorted(set(observer.failed.values()))[:3]:
        print(f"  failed: {reason}")
    for error in errors[:3]:
        print(f"  create error: {error}")


#: The real control plane's processes, in the order the report lists them (kubelets and fake
#: runtimes summed over the nodes).
KUBE_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-scheduler-gpubus",
              "kubelets", "fake-cris")


def simulator_line(cpu: dict[str, float], wall: float) -> None:
    sim = cpu.get("control", 0) + cpu.get("kube-scheduler", 0) + cpu.get("nodes", 0)
    print(f"CPU seconds over {wall:.1f}s: simulator {sim:.1f} (API server {cpu.get('control', 0):.1f}, "
          f"kube-scheduler {cpu.get('kube-scheduler', 0):.1f}, kubelets+monitor {cpu.get('nodes', 0):.1f}) "
          f"= {sim / wall * 100:.0f}% of a core; "
          f"scheduler {cpu.get('scheduler', 0):.1f}, node-agents {cpu.get('agents', 0):.1f}, "
          f"webhook {cpu.get('webhook', 0):.1f}, nats-server {cpu.get('nats', 0):.1f}, "
          f"this client {cpu.get('bench', 0):.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--rate", type=float, default=400.0, help="Open-loop arrivals, pods/s.")
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--devices", default="8xA100-80GB")
    parser.add_argument("--mix", choices=sorted(MIX), default="standard")
    parser.add_argument("--duration", default="2s", help="How long each pod runs (gpubus.io/sim-duration).")
    parser.add_argument("--stall-s", type=float, default=60.0,
                        help="Give up waiting when no pod started for this long.")
    parser.add_argument("--data-dir", default=None,
                        help="Keep the stack's data (logs, NATS store) here; by default a temp dir, removed.")
    parser.add_argument("--profile", action="store_true", help="cProfile the simulator processes.")
    parser.add_argument("--normal-events", action="store_true",
                        help="Stand-ins also record Normal events (Scheduled, Started), as in `gpubus up`.")
    parser.add_argument("--single-node-filter", action="store_true",
                        help="HAMi mode: filter returns only the best node (no /prioritize round trip).")
    parser.add_argument("--node-identity", action=argparse.BooleanOptionalAction, default=True,
                        help="Node-agents connect as their own node (auth callout), as in `gpubus up`.")
    parser.add_argument("--idle-s", type=float, default=10.0,
                        help="Measure each process's idle CPU this long before the load.")
    parser.add_argument("--idle-only", action="store_true",
                        help="Stop after the idle measurement (idle CPU and NATS messages/s); no load.")
    parser.add_argument("--control-plane", choices=("sim", "kubernetes"), default="sim",
                        help="sim: the stand-ins (`gpubus up`); kubernetes: the real control plane and "
                             "real kubelets (scripts/kube-build).")
    parser.add_argument("--smoke", action="store_true", help="2 nodes x 2 GPUs, 20 small pods at 50/s.")
    args = parser.parse_args()
    if args.smoke:
        args.pods, args.rate, args.nodes, args.devices, args.mix = 20, 50.0, 2, "2xA100-80GB", "small"
        args.idle_s = 1.0
        if args.control_plane == "kubernetes":
            args.duration = "1s"
    uvloop.run(main(args))  # the services' loop too: the client's own CPU stays small
