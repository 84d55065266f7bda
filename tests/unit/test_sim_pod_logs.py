"""Container logs of the simulated cluster: ``sim.pod_logs`` (pure) and ``log_files`` (the files).

Case matrix:
- CRI records: written with Go's RFC3339Nano (the layout itself: ``test_sim_rfc3339``) and read back;
  partial records; what is not a record is skipped;
- what a container prints: from the node-agent's own Allocate answer (one and two GPUs; memory in
  MiB, the SM limit, HAMi-core through ``/etc/ld.so.preload``), without a limit, without HAMi-core
  preloaded, a container without GPUs;
- the query: every parameter kubectl sends, decoded as the parameter codec does (booleans, int64s,
  RFC 3339); a malformed value 400 with Go's words; invalid values 422 ``PodLogOptions`` with causes;
- the container and its state: chosen or refused as ``LogLocation`` does; an unscheduled pod reads
  empty; a bound Pending pod is waiting (ContainerCreating, PodInitializing); running, terminated
  (with and without an ID), waiting with the kubelet's words, ``previous`` without one, no status
  after Pending; names that could leave the directory;
- the answer: tail, then since, timestamps with nine fraction digits, only whole records, limitBytes;
  whether a container still runs (a new pod of the same name does not count);
- the files: the /var/log/pods layout made on the first write and appended to after, a removed pod's
  directory gone, a name that could leave the directory never written.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from gpubus_local.sim import pod_logs
from gpubus_local.sim.errors import ApiError
from gpubus_local.sim.log_files import PodLogFiles
from gpubus_local.sim.pod_logs import LogOptions, LogTarget
from services.node_agent.allocate import AllocateConfig, build_container_response
from shared.model import ContainerDevice, DeviceUUID

NS = 1_000_000_000
T0 = 1_767_225_600 * NS  # 2026-01-01T00:00:00Z

# -- CRI records -------------------------------------------------------------------------------------------


def test_each_line_is_one_whole_stdout_record() -> None:
    data = pod_logs.cri_lines(T0 + 5, ["hello", "two\nlines"])
    assert data == (b"2026-01-01T00:00:00.000000005Z stdout F hello\n"
                    b"2026-01-01T00:00:00.000000005Z stdout F two\n"
                    b"2026-01-01T00:00:00.000000005Z stdout F lines\n")
    first = pod_logs.parse_cri(data.split(b"\n")[0])
    assert first == pod_logs.CriLine(time_ns=T0 + 5, stream="stdout", full=True, text=b"hello")


@pytest.mark.parametrize("line", [
    b"", b"garbage", b"2026-01-01T00:00:00Z stdin F x", b"yesterday stdout F x",
    b"2026-01-01T00:00:00Z stdout X x",
    b"2026-13-01T00:00:00Z stdout F x",
])
def test_what_is_not_a_record_is_skipped(line: bytes) -> None:
    assert pod_logs.parse_cri(line) is None


def test_a_partial_record_and_an_empty_one_parse() -> None:
    assert pod_logs.parse_cri(b"2026-01-01T00:00:00Z stderr P half") == pod_logs.CriLine(
        time_ns=T0, stream="stderr", full=False, text=b"half")
    assert pod_logs.parse_cri(b"2026-01-01T00:00:00Z stdout F") == pod_logs.CriLine(
        time_ns=T0, stream="stdout", full=True, text=b"")


# -- what a container prints ------------------------------------------------------------------------------

HOOK = AllocateConfig(hook_path="/usr/local")
UUID_A, UUID_B = "GPU-aaaa", "GPU-bbbb"
NAMES = {UUID_A: "A100-SXM4-80GB", UUID_B: "H100 80GB HBM3"}


def allocate(*devices: ContainerDevice, config: AllocateConfig = HOOK) -> tuple[dict[str, str], Any]:
    """What the node-agent answers Allocate with, as (envs, mounts) the kubelet stand-in records them."""
    answer = build_container_response(devices, config, pod_uid="uid-1", container="main", cache_id="c1")
    return dict(answer.envs), tuple((m.container_path, m.host_path, m.read_only) for m in answer.mounts)


def started(envs: dict[str, str], mounts: Any = ()) -> list[str]:
    return pod_logs.start_lines(node="node-1", namespace="default", pod="p", container="main", envs=envs,
                                mounts=mounts, gpu_names=NAMES)


def test_a_gpu_container_prints_its_gpu_its_limits_and_hami_core_from_the_allocate_answer() -> None:
    envs, mounts = allocate(ContainerDevice(uuid=DeviceUUID(UUID_A), usedmem=3000, usedcores=30))
    assert started(envs, mounts) == [
        "Started container main of pod default/p on node node-1 (simulated by gpubus)",
        "GPU 0: A100-SXM4-80GB (UUID: GPU-aaaa)  memory limit 3000 MiB  SM limit 30 %",
        "HAMi-core: /usr/local/vgpu/libvgpu.so preloaded through /etc/ld.so.preload",
    ]


def test_two_gpus_each_get_their_own_memory_limit_and_the_shared_sm_limit() -> None:
    envs, mounts = allocate(ContainerDevice(uuid=DeviceUUID(UUID_A), usedmem=8192, usedcores=50, idx=0),
                            ContainerDevice(uuid=DeviceUUID(UUID_B), usedmem=16384, usedcores=50, idx=1))
    assert started(envs, mounts)[1:3] == [
        "GPU 0: A100-SXM4-80GB (UUID: GPU-aaaa)  memory limit 8192 MiB  SM limit 50 %",
        "GPU 1: H100 80GB HBM3 (UUID: GPU-bbbb)  memory limit 16384 MiB  SM limit 50 %",
    ]


@pytest.mark.parametrize(("memory", "sm", "shown"), [
    ("0", "0", "memory limit none  SM limit none"),
    ("2g", "100", "memory limit 2048 MiB  SM limit 100 %"),
    ("1048576", "", "memory limit 1 MiB  SM limit none"),
    ("lots", "x", "memory limit none  SM limit none"),
])
def test_limits_read_as_hami_core_reads_them(memory: str, sm: str, shown: str) -> None:
    envs = {"NVIDIA_VISIBLE_DEVICES": "GPU-zzzz", "CUDA_DEVICE_MEMORY_LIMIT_0": memory,
            "CUDA_DEVICE_SM_LIMIT": sm}
    assert started(envs)[1] == f"GPU 0: unknown model (UUID: GPU-zzzz)  {shown}"


def test_hami_core_mounted_but_not_preloaded_is_said_so() -> None:
    envs, mounts = allocate(ContainerDevice(uuid=DeviceUUID(UUID_A), usedmem=1, usedcores=1))
    without_preload = tuple(m for m in mounts if m[0] != "/etc/ld.so.preload")
    assert started(envs, without_preload)[-1] == ("HAMi-core: /usr/local/vgpu/libvgpu.so mounted but not "
                                                   "preloaded: the limits are not enforced")
    assert started({**envs, "LD_PRELOAD": "/usr/local/vgpu/libvgpu.so"}, without_preload)[-1] == (
        "HAMi-core: /usr/local/vgpu/libvgpu.so preloaded through LD_PRELOAD")


def test_a_container_without_gpus_prints_only_its_start_and_exit() -> None:
    assert started({}) == ["Started container main of pod default/p on node node-1 (simulated by gpubus)"]
    assert pod_logs.exit_line("main") == "Container main exited with code 0 (Completed)"


# -- the query -------------------------------------------------------------------------------------------


def test_every_parameter_kubectl_sends_is_decoded() -> None:
    query = {"container": "main", "follow": "true", "previous": "false", "sinceSeconds": "5",
             "timestamps": "True", "tailLines": "2", "limitBytes": "10", "unknown": "ignored"}
    assert pod_logs.parse_options("p", query) == LogOptions(
        container="main", follow=True, since_seconds=5, timestamps=True, tail_lines=2, limit_bytes=10)
    since = pod_logs.parse_options("p", {"sinceTime": "2026-01-01T00:00:00Z"})
    assert since.since_time_ns == T0


@pytest.mark.parametrize(("value", "follow"), [
    ("true", True), ("1", True), ("yes", True), ("", True), ("0", False), ("false", False), ("FALSE", False),
])
def test_booleans_are_true_unless_0_or_false(value: str, follow: bool) -> None:
    assert pod_logs.parse_options("p", {"follow": value}).follow is follow


@pytest.mark.parametrize(("query", "message"), [
    ({"tailLines": "a"}, 'strconv.ParseInt: parsing "a": invalid syntax'),
    ({"tailLines": ""}, 'strconv.ParseInt: parsing "": invalid syntax'),
    ({"limitBytes": " 5"}, 'strconv.ParseInt: parsing " 5": invalid syntax'),
    ({"sinceSeconds": "9223372036854775808"},
     'strconv.ParseInt: parsing "9223372036854775808": value out of range'),
    ({"sinceTime": "yesterday"},
     'parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": not an RFC 3339 time'),
])
def test_a_value_that_does_not_decode_is_a_400(query: dict[str, str], message: str) -> None:
    with pytest.raises(ApiError) as caught:
        pod_logs.parse_options("p", query)
    assert (caught.value.code, caught.value.reason, caught.value.message) == (400, "BadRequest", message)


@pytest.mark.parametrize(("query", "message"), [
    ({"tailLines": "-1"}, "tailLines: Invalid value: -1: must be greater than or equal to 0"),
    ({"limitBytes": "0"}, "limitBytes: Invalid value: 0: must be greater than 0"),
    ({"sinceSeconds": "0"}, "sinceSeconds: Invalid value: 0: must be greater than 0"),
    ({"sinceSeconds": "5", "sinceTime": "2026-01-01T00:00:00Z"},
     ": Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"),
    ({"tailLines": "-1", "limitBytes": "-1"}, "[tailLines: Invalid value: -1: must be greater than or equal "
     "to 0, limitBytes: Invalid value: -1: must be greater than 0]"),
])
def test_invalid_options_are_a_422_with_their_causes(query: dict[str, str], message: str) -> None:
    with pytest.raises(ApiError) as caught:
        pod_logs.parse_options("p", query)
    error = caught.value
    assert (error.code, error.reason) == (422, "Invalid")
    assert error.message == f'PodLogOptions "p" is invalid: {message}'
    assert error.details["kind"] == "PodLogOptions" and error.details["causes"]


# -- the container and its state -----------------------------------------------------------------------


def pod(*, node: str = "node-1", phase: str = "Running", statuses: list[dict[str, Any]] | None = None,
        containers: tuple[str, ...] = ("main",), inits: tuple[str, ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": n} for n in containers]}
    if inits:
        spec["initContainers"] = [{"name": n} for n in inits]
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase}
    if statuses is not None:
        status["containerStatuses"] = statuses
    return {"metadata": {"namespace": "default", "name": "p", "uid": "u1"}, "spec": spec, "status": status}


def state(**state: Any) -> dict[str, Any]:
    return {"name": "main", "restartCount": 0, "containerID": "sim://u1/main", "state": state}


RUNNING = state(running={"startedAt": "2026-01-01T00:00:00Z"})


def refusal(p: dict[str, Any], **options: Any) -> str:
    with pytest.raises(ApiError) as caught:
        pod_logs.locate(p, LogOptions(**options))
    assert (caught.value.code, caught.value.reason) == (400, "BadRequest")
    return caught.value.message


def test_a_running_container_is_read_from_its_file_and_may_grow() -> None:
    assert pod_logs.locate(pod(statuses=[RUNNING]), LogOptions()) == LogTarget(
        container="main", path="default_p_u1/main/0.log", running=True)


def test_a_terminated_container_is_read_and_does_not_grow() -> None:
    done = state(terminated={"exitCode": 0, "containerID": "sim://u1/main"})
    target = pod_logs.locate(pod(phase="Succeeded", statuses=[done]), LogOptions(container="main"))
    assert target == LogTarget(container="main", path="default_p_u1/main/0.log", running=False)


@pytest.mark.parametrize(("p", "options", "message"), [
    (pod(statuses=[RUNNING]), {"container": "x"}, "container x is not valid for pod p"),
    (pod(statuses=[RUNNING], containers=("a", "b"), inits=("i",)), {},
     "a container name must be specified for pod p, choose one of: [i a b]"),
    (pod(statuses=[RUNNING], containers=()), {}, "a container name must be specified for pod p"),
    (pod(phase="Pending"), {}, 'container "main" in pod "p" is waiting to start: ContainerCreating'),
    (pod(phase="Pending", inits=("warmup",)), {},
     'container "main" in pod "p" is waiting to start: PodInitializing'),
    (pod(phase="Pending", inits=("warmup",)), {"container": "warmup"},
     'container "warmup" in pod "p" is waiting to start: ContainerCreating'),
    (pod(phase="Failed"), {}, 'container "main" in pod "p" is not available'),
    (pod(statuses=[state(waiting={"reason": "ErrImagePull"})]), {},
     "container \"main\" in pod \"p\" is waiting to start: image can't be pulled"),
    (pod(statuses=[state(waiting={"reason": "ImagePullBackOff"})]), {},
     'container "main" in pod "p" is waiting to start: trying and failing to pull image'),
    (pod(statuses=[state(waiting={"reason": "CrashLoopBackOff"})]), {},
     'container "main" in pod "p" is waiting to start: CrashLoopBackOff'),
    (pod(statuses=[state()]), {}, 'container "main" in pod "p" is waiting to start - no logs yet'),
    (pod(statuses=[state(terminated={"exitCode": 1})]), {}, 'container "main" in pod "p" is terminated'),
    (pod(statuses=[RUNNING]), {"previous": True},
     'previous terminated container "main" in pod "p" not found'),
])
def test_refusals_are_the_api_servers_and_the_kubelets(p: dict[str, Any], options: dict[str, Any],
                                                       message: str) -> None:
    assert refusal(p, **options) == message


def test_an_unscheduled_pod_has_an_empty_log_but_still_a_valid_container() -> None:
    assert pod_logs.locate(pod(node="", phase="Pending"), LogOptions()) is None
    assert refusal(pod(node="", phase="Pending"), container="x") == "container x is not valid for pod p"


def test_the_previous_log_is_the_file_before_the_last_restart() -> None:
    restarted = {**RUNNING, "restartCount": 2,
                 "lastState": {"terminated": {"exitCode": 1, "containerID": "x"}}}
    target = pod_logs.locate(pod(statuses=[restarted]), LogOptions(previous=True))
    assert target == LogTarget(container="main", path="default_p_u1/main/1.log", running=False)


def test_a_name_that_could_leave_the_log_directory_is_never_a_path() -> None:
    sneaky = {**RUNNING, "name": "../../etc"}
    assert refusal(pod(statuses=[sneaky], containers=("../../etc",))) == (
        'container "../../etc" in pod "p" is not available')
    for part in ("..", "a/b", "", ".hidden", "a\0b"):
        with pytest.raises(ValueError, match="cannot name a log directory"):
            pod_logs.log_path("default", "p", "u1", part)


# -- the answer -----------------------------------------------------------------------------------------

LOG = pod_logs.cri_lines(T0, ["one"]) + pod_logs.cri_lines(T0 + 2 * NS, ["two", "three"]) + b"garbage\n"


@pytest.mark.parametrize(("cutoff", "tail", "expected"), [
    (None, None, b"one\ntwo\nthree\n"),
    (None, 2, b"three\n"),  # the last two lines of the file, one of which is not a record
    (None, 0, b""),
    (None, 100, b"one\ntwo\nthree\n"),
    (T0 + 1, None, b"two\nthree\n"),
    (T0 + 2 * NS, 3, b"two\nthree\n"),
    (T0 + 3 * NS, None, b""),
])
def test_tail_then_since_pick_the_records(cutoff: int | None, tail: int | None, expected: bytes) -> None:
    assert pod_logs.select(LOG, cutoff_ns=cutoff, tail_lines=tail, timestamps=False) == expected


def test_timestamps_have_nine_fraction_digits_and_a_half_record_waits() -> None:
    data = pod_logs.cri_lines(T0 + 500_000_000, ["a"]) + b"2026-01-01T00:00:01Z stdout P par"
    assert pod_logs.select(data, cutoff_ns=None, tail_lines=None, timestamps=True) == (
        b"2026-01-01T00:00:00.500000000Z a\n")
    assert pod_logs.complete(data) == len(pod_logs.cri_lines(T0 + 500_000_000, ["a"]))
    partial = b"2026-01-01T00:00:01Z stdout P par\n2026-01-01T00:00:01Z stdout F t\n"
    assert pod_logs.select(partial, cutoff_ns=None, tail_lines=None, timestamps=False) == b"part\n"


def test_since_seconds_counts_back_from_the_request() -> None:
    assert pod_logs.since_cutoff(LogOptions(since_seconds=5), T0 + 10 * NS) == T0 + 5 * NS
    assert pod_logs.since_cutoff(LogOptions(since_time_ns=T0), T0 + 10 * NS) == T0
    assert pod_logs.since_cutoff(LogOptions(), T0) is None


@pytest.mark.parametrize(("chunk", "remaining", "expected"), [
    (b"hello", None, (b"hello", None)), (b"hello", 3, (b"hel", 0)), (b"hi", 5, (b"hi", 3)),
    (b"", 2, (b"", 2)),
])
def test_limit_bytes_counts_what_is_sent(chunk: bytes, remaining: int | None,
                                         expected: tuple[bytes, int | None]) -> None:
    assert pod_logs.clip(chunk, remaining) == expected


def test_only_the_same_pods_running_container_is_running() -> None:
    running = pod(statuses=[RUNNING])
    assert pod_logs.is_running(running, "u1", "main")
    assert not pod_logs.is_running(running, "another-uid", "main")
    assert not pod_logs.is_running(None, "u1", "main")
    assert not pod_logs.is_running(pod(statuses=[state(terminated={"exitCode": 0})]), "u1", "main")


# -- the files ------------------------------------------------------------------------------------------


def test_a_log_is_made_in_the_pod_log_layout_and_appended_to(tmp_path: Path) -> None:
    files = PodLogFiles(tmp_path / "pods")  # made on the first write
    files.write("default", "p", "u1", "main", lines=["start"], time_ns=T0)
    files.write("default", "p", "u1", "main", lines=["end"], time_ns=T0 + NS)
    path = tmp_path / "pods" / "default_p_u1" / "main" / "0.log"
    assert path.read_bytes() == pod_logs.cri_lines(T0, ["start"]) + pod_logs.cri_lines(T0 + NS, ["end"])
    assert files.read("default_p_u1/main/0.log", len(pod_logs.cri_lines(T0, ["start"]))) == (
        pod_logs.cri_lines(T0 + NS, ["end"]))


def test_a_removed_pods_logs_go_and_other_pods_stay(tmp_path: Path) -> None:
    files = PodLogFiles(tmp_path)
    for container in ("warmup", "main"):
        files.write("default", "p", "u1", container, lines=["x"], time_ns=T0)
    files.write("default", "q", "u2", "main", lines=["x"], time_ns=T0)
    files.remove("default", "p", "u1", ["warmup", "main"])
    files.remove("default", "gone", "u3", ["main"])  # never written: nothing to do
    assert sorted(p.name for p in tmp_path.iterdir()) == ["default_q_u2"]


def test_a_name_that_could_leave_the_directory_is_not_written(tmp_path: Path) -> None:
    files = PodLogFiles(tmp_path / "pods")
    files.write("default", "p", "u1", "../escape", lines=["x"], time_ns=T0)
    assert list(tmp_path.rglob("*")) == []


def test_a_log_directory_that_cannot_be_made_loses_the_log_not_the_pod(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A bad --pod-log-dir must not raise into the kubelet's pod run: here the log file's open fails
    as missing, and making the directories then fails too (the root cannot be made under a file); the
    write is a warning and there is no log to read."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    relative = pod_logs.log_path("default", "p", "uid-1", "main")
    for root in (Path("/proc/self/no-such-dir/pods"), blocker / "pods"):
        files = PodLogFiles(root)
        with caplog.at_level(logging.WARNING, logger="gpubus_local.sim.log_files"):
            files.write("default", "p", "uid-1", "main", lines=["started"], time_ns=1_700_000_000_000_000_000)
        with pytest.raises(OSError):
            files.read(relative)
    assert [r.getMessage().split(": ")[:2] for r in caplog.records] == [
        ["pod default/p", "container main log not written"]] * 2
