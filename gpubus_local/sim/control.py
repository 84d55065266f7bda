"""The control-plane processes of ``gpubus up``: the API server stand-in and the kube-scheduler stand-in.

Two processes, as on a real control plane. The API server calls the webhook over HTTPS (trusting
the stack's CA) on every pod CREATE and writes the kubeconfig; the kube-scheduler stand-in
list-watches the API server through that kubeconfig and schedules pods named for gpubus through
the extender's HTTP API. Apart, the scheduler's serial cycle (filter, prioritize: two round trips
to the extender) does not wait behind the API server's own work in one event loop: in one process
that wait was most of the cycle, and the cycle bounded pods/s (``bench/e2e.py``). Each writes its
ready file when it serves; the API server first empties the pod log directory, whose pods died with
the last one. Composition only: both parts live beside it (``apiserver``, ``scheduler``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from gpubus_local.sim.admission import WebhookConfig
from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.events import RecorderSettings
from gpubus_local.sim.extender_client import ExtenderConfig
from gpubus_local.sim.kube import SimKubeClient
from gpubus_local.sim.log_files import PodLogFiles
from gpubus_local.sim.objects import DEFAULT_SCHEDULER
from gpubus_local.sim.scheduler import SchedulerSettings, SimScheduler
from shared.tasks import cancel_and_wait

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlSpec:
    """The API server stand-in."""

    port: int
    kubeconfig: Path
    webhook_url: str
    webhook_ca: Path
    ready_file: Path | None = None
    host: str = "127.0.0.1"
    """Where it listens, and the server its kubeconfig names: under compose the service's name, which
    the other containers resolve and the published port reaches."""
    pod_log_dir: Path | None = None
    """The simulated kubelets' pod log directory, which ``kubectl logs`` reads (shared with the nodes).
    Emptied at start: their pods died with the last API server (under ``docker compose`` the directory
    outlives it, on the state volume)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KubeSchedulerSpec:
    """The kube-scheduler stand-in."""

    kubeconfig: Path
    extender_url: str
    scheduler_name: str
    ready_file: Path | None = None
    normal_events: bool = True
    """Record Scheduled events (FailedScheduling always)."""


def write_ready(path: Path | None, **facts: object) -> None:
    """Atomically publish readiness (the parent probes for the file)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), **facts}))
    tmp.replace(path)


def stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)


async def run_control(spec: ControlSpec) -> None:
    """Serve the API server until SIGTERM/SIGINT."""
    stop = asyncio.Event()
    stop_on_signals(stop)
    webhook = WebhookConfig(name="vgpu.hami.io", url=spec.webhook_url, ca_bundle=spec.webhook_ca.read_bytes(),
                            failure_policy="Fail", timeout_s=10.0)
    if spec.pod_log_dir is not None:  # the API server starts empty: every earlier pod, and so log, is gone
        PodLogFiles(spec.pod_log_dir).clear()
    api = SimApiServer(host=spec.host, port=spec.port, webhooks=[webhook], log_dir=spec.pod_log_dir)
    await api.start()
    try:
        api.write_kubeconfig(spec.kubeconfig)
        write_ready(spec.ready_file, apiserver=api.url, kubeconfig=str(spec.kubeconfig))
        log.info("API server up: %s (kubeconfig %s)", api.url, spec.kubeconfig)
        await stop.wait()
    finally:
        await api.stop()


async def run_kube_scheduler(spec: KubeSchedulerSpec) -> None:
    """Schedule until SIGTERM/SIGINT; exit 1 if the scheduler dies (its informers cannot recover)."""
    stop = asyncio.Event()
    stop_on_signals(stop)
    kube = await SimKubeClient.from_kubeconfig(spec.kubeconfig)
    extender = ExtenderConfig(url_prefix=spec.extender_url, http_timeout_s=30.0, node_cache_capable=True)
    # like a cluster's kube-scheduler, it also runs the default profile (pods without GPUs); a
    # profile named twice is one profile
    settings = SchedulerSettings(scheduler_name=spec.scheduler_name, plain_profiles=(DEFAULT_SCHEDULER,),
                                 events=RecorderSettings(normal=spec.normal_events))
    scheduler = SimScheduler(kube, [extender], settings)
    running = asyncio.create_task(scheduler.run(), name="sim-scheduler")
    stopping = asyncio.create_task(stop.wait(), name="kube-scheduler-stop")
    synced = asyncio.create_task(scheduler.synced.wait(), name="kube-scheduler-synced")
    try:
        await asyncio.wait([running, stopping, synced], return_when=asyncio.FIRST_COMPLETED)
        if synced.done() and not (running.done() or stopping.done()):
            write_ready(spec.ready_file, scheduler_name=spec.scheduler_name, extender=spec.extender_url)
            log.info("kube-scheduler up: scheduling %s pods via %s", spec.scheduler_name, spec.extender_url)
            await asyncio.wait([running, stopping], return_when=asyncio.FIRST_COMPLETED)
        if running.done() and not running.cancelled():
            log.error("kube-scheduler stand-in died: %r", running.exception())
            raise SystemExit(1)
    finally:
        await cancel_and_wait(running, stopping, synced)
        await scheduler.stop()
        await kube.close()
