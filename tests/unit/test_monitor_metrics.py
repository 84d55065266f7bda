"""The /metrics exposition: HAMi's names, labels and values exactly, legacy names on request,
gpubus's own counters; and promtool's lint on the rendered text.

Case matrix: host metrics {node label; memory-controller family without it}; container metrics
{all seven gauges, last-kernel only when known}; zone="vGPU" on every hami_* series but
hami_build_info; legacy {off: absent, on: HAMi's pre-v2.9 names and labels}; own metrics
{samples, failures, up, decode errors, over limit}; promtool {clean, legacy only camelCase lints}.
"""

from __future__ import annotations

from monitor_builders import GPU0, UID_A, ScriptedSource, monitor_with, promtool_check
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from services.monitor.metrics import BuildInfo, MonitorCollector, make_registry
from services.monitor.monitor import Monitor
from services.monitor.readings import (
    ContainerReading,
    Defect,
    DefectReason,
    DeviceReading,
    HostReading,
    SourceReading,
)

NOW = 1_700_000_100.0


def scraped_monitor() -> Monitor:
    source = ScriptedSource("hami-core")
    source.reading = SourceReading(
        containers=(
            ContainerReading(
                pod_uid=UID_A,
                container="main",
                last_kernel_time=int(NOW) - 40,
                devices=(
                    DeviceReading(
                        uuid=GPU0,
                        vindex=0,
                        used_bytes=300,
                        limit_bytes=1,
                        sm_util=37.0,
                        context_bytes=100,
                        module_bytes=50,
                        buffer_bytes=120,
                    ),
                ),
            ),
        ),
        host=(
            HostReading(
                uuid=GPU0,
                index=3,
                type="NVIDIA-A100-SXM4-80GB",
                used_bytes=5000,
                gpu_util=61.0,
                memory_util=12.0,
            ),
        ),
        defects=(Defect(where="/x", reason=DefectReason.BAD_MAGIC),),
    )
    m, _ = monitor_with(source)
    m.cycle(now=NOW)
    return m


def render(legacy: bool = False) -> str:
    collector = MonitorCollector(
        lambda: [scraped_monitor()],
        legacy=legacy,
        build=BuildInfo(version="0.1.0", revision="abc"),
        clock=lambda: NOW,
    )
    return generate_latest(make_registry(collector)).decode()


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


CTR = {
    "namespace": "team",
    "pod": "train",
    "container": "main",
    "vdevice_index": "0",
    "device_uuid": GPU0,
    "zone": "vGPU",
}


def test_host_metrics_carry_hamis_labels() -> None:
    got = samples(render())
    host = {
        "node": "n1",
        "device_index": "3",
        "device_uuid": GPU0,
        "device_type": "NVIDIA-A100-SXM4-80GB",
        "zone": "vGPU",
    }
    assert got["hami_host_gpu_memory_used_bytes"] == [(host, 5000.0)]
    assert got["hami_host_gpu_utilization_ratio"] == [(host, 61.0)]
    assert got["hami_host_gpu_memory_controller_utilization_ratio"] == [
        ({k: v for k, v in host.items() if k != "node"}, 12.0)
    ]


def test_container_metrics_carry_hamis_labels_and_values() -> None:
    got = samples(render())
    expected = {
        "hami_vgpu_memory_used_bytes": 300.0,
        "hami_vgpu_memory_limit_bytes": float(1000 << 20),  # the ledger's slice, not the region's figure
        "hami_container_device_memory_bytes": 300.0,
        "hami_container_device_utilization_ratio": 37.0,
        "hami_vgpu_memory_context_bytes": 100.0,
        "hami_vgpu_memory_module_bytes": 50.0,
        "hami_vgpu_memory_buffer_bytes": 120.0,
        "hami_container_last_kernel_elapsed_seconds": 40.0,
    }
    for name, value in expected.items():
        assert got[name] == [(CTR, value)], name


def test_build_info_has_hamis_labels_and_no_zone() -> None:
    [(labels, value)] = samples(render())["hami_build_info"]
    assert value == 1.0
    assert set(labels) == {"version", "revision", "build_date", "go_version", "compiler", "platform"}
    assert labels["version"] == "0.1.0"


def test_legacy_names_only_with_the_switch() -> None:
    assert "vGPU_device_memory_usage_in_bytes" not in samples(render())
    got = samples(render(legacy=True))
    legacy = {
        "podnamespace": "team",
        "podname": "train",
        "ctrname": "main",
        "vdeviceid": "0",
        "deviceuuid": GPU0,
        "zone": "vGPU",
    }
    assert got["vGPU_device_memory_usage_in_bytes"] == [(legacy, 300.0)]
    assert got["vGPU_device_memory_limit_in_bytes"] == [(legacy, float(1000 << 20))]
    assert got["Device_utilization_desc_of_container"] == [(legacy, 37.0)]
    assert got["Device_last_kernel_of_container"] == [(legacy, 40.0)]
    assert got["Device_memory_desc_of_container"] == [
        ({**legacy, "context": "100", "module": "50", "data": "120", "offset": "30"}, 300.0)
    ]
    host = {
        "nodeid": "n1",
        "deviceidx": "3",
        "deviceuuid": GPU0,
        "devicetype": "NVIDIA-A100-SXM4-80GB",
        "zone": "vGPU",
    }
    assert got["HostGPUMemoryUsage"] == [(host, 5000.0)]
    assert got["HostCoreUtilization"] == [(host, 61.0)]


def test_own_metrics_count_samples_failures_and_decode_errors() -> None:
    got = samples(render())
    assert got["gpubus_monitor_samples_total"] == [({"node": "n1", "source": "hami-core"}, 1.0)]
    assert got["gpubus_monitor_source_up"] == [({"node": "n1", "source": "hami-core"}, 1.0)]
    assert got["gpubus_monitor_source_failures_total"] == [({"node": "n1", "source": "hami-core"}, 0.0)]
    assert got["gpubus_monitor_decode_errors_total"] == [
        ({"node": "n1", "source": "hami-core", "reason": "bad_magic"}, 1.0)
    ]
    assert got["gpubus_monitor_containers_over_limit"] == [({"node": "n1"}, 0.0)]
    assert got["gpubus_monitor_ledger_pods"] == [({"node": "n1"}, 2.0)]


def test_no_created_series_and_no_process_metrics() -> None:
    text = render()
    assert "_created" not in text
    assert "process_" not in text and "python_gc" not in text


# -- promtool --------------------------------------------------------------------------------


def test_promtool_accepts_the_exposition() -> None:
    done = promtool_check(render())
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_finds_only_hamis_legacy_camel_case_in_legacy_mode() -> None:
    done = promtool_check(render(legacy=True))
    problems = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert problems, "legacy names are camelCase; promtool is expected to say so"
    assert all("camelCase" in p or "snake_case" in p for p in problems), problems
