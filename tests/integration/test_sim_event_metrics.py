"""The event recorders' counters on /metrics: every ``RecorderStats`` field is a counter
``gpubus_sim_events_<field>_total`` with help text, read at scrape time and summed over the recorders.

Case matrix: every field has its own help text; a registry reads the current sums (zero with no
recorders yet); the nodes process's monitor (``build_monitor``) serves the kubelets' counters on its
real /metrics socket, counted by real recorders (a full queue drops, the spam filter drops a repeat).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpubus_local.sim.event_metrics import HELP, RecorderStatsCollector
from gpubus_local.sim.events import CorrelatorSettings, RecorderSettings, RecorderStats, pod_reference
from gpubus_local.sim.node import SimNode, SimNodeSettings
from gpubus_local.sim.nodes import NodesSpec, build_monitor

FIELDS = [f.name for f in dataclasses.fields(RecorderStats)]


def counters(text: str) -> dict[str, tuple[str, float]]:
    """``gpubus_sim_events_*`` family name -> (help, value of its ``_total`` sample)."""
    return {f.name: (f.documentation, next(s.value for s in f.samples if s.name.endswith("_total")))
            for f in text_string_to_metric_families(text) if f.name.startswith("gpubus_sim_events_")}


def test_every_counter_has_its_own_help_text() -> None:
    assert sorted(HELP) == sorted(FIELDS)


def test_a_registry_reads_the_current_sums_over_the_recorders() -> None:
    recorders: list[RecorderStats] = []
    registry = CollectorRegistry()
    registry.register(RecorderStatsCollector(lambda: recorders))
    assert counters(generate_latest(registry).decode()) == {
        f"gpubus_sim_events_{name}": (HELP[name], 0.0) for name in FIELDS}
    recorders += [RecorderStats(created=3, retries=1), RecorderStats(created=2, failed=1)]
    got = counters(generate_latest(registry).decode())
    assert got["gpubus_sim_events_created"] == (HELP["created"], 5.0)
    assert (got["gpubus_sim_events_failed"][1], got["gpubus_sim_events_retries"][1]) == (1.0, 1.0)


async def test_the_nodes_monitor_serves_the_kubelets_event_counters(tmp_path: Path) -> None:
    # No room in the queue, and one event per pod before the spam filter closes.
    events = RecorderSettings(queue_limit=0, correlator=CorrelatorSettings(spam_burst=1))
    kube: Any = None  # never called: the nodes are not started and their recorders do not run
    sims = {node: SimNode(SimNodeSettings(node=node, plugin_dir=tmp_path / node, events=events,
                                          pod_resources_socket=tmp_path / node / "pr.sock"), kube)
            for node in ("node-1", "node-2")}
    spec = NodesSpec(nodes=2, devices="1xA100-80GB", kubeconfig=tmp_path / "kubeconfig", nats_url="",
                     metrics_port=0, monitor_interval_s=3600.0)
    monitor = build_monitor(spec, list(sims), None, sims)
    async with monitor:
        for sim in sims.values():
            for _ in range(2):  # the first is dropped (queue full), its repeat by the spam filter
                sim.events.record(pod_reference({"metadata": {"name": "p", "namespace": "n"}}), "Warning",
                                  "FailedScheduling", "0/4 nodes are available")
        url = f"http://127.0.0.1:{monitor.metrics_port}/metrics"
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            assert response.status == 200
            got = counters(await response.text())
    assert {name: value for name, (_, value) in got.items()} == {
        "gpubus_sim_events_created": 0.0, "gpubus_sim_events_patched": 0.0, "gpubus_sim_events_spam": 2.0,
        "gpubus_sim_events_dropped": 2.0, "gpubus_sim_events_failed": 0.0, "gpubus_sim_events_retries": 0.0}
    assert got["gpubus_sim_events_dropped"][0] == HELP["dropped"]
