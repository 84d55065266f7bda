"""Which pod a process belongs to, from /proc/<pid>/cgroup, on a fake /proc tree.

Case matrix: cgroup {v1, v2, hybrid} x driver {systemd, cgroupfs} x runtime {containerd, CRI-O,
docker} x QoS {guaranteed, burstable, besteffort}; not-a-pod {host service, garbage, missing
pid, root cgroup}; CRI-O's conmon scope names the pod but no container.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from services.monitor.cgroup import CgroupRef, ProcCgroups, parse_cgroup
from services.monitor.errors import CgroupError

UID = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
US = UID.replace("-", "_")
CID = "9f" * 32

CASES = {
    "v2-systemd-containerd-burstable": (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{US}.slice/cri-containerd-{CID}.scope\n",
        CgroupRef(pod_uid=UID, container_id=CID, runtime="containerd"),
    ),
    "v2-systemd-crio-besteffort": (
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{US}.slice/crio-{CID}.scope\n",
        CgroupRef(pod_uid=UID, container_id=CID, runtime="cri-o"),
    ),
    "v2-systemd-guaranteed": (
        f"0::/kubepods.slice/kubepods-pod{US}.slice/cri-containerd-{CID}.scope\n",
        CgroupRef(pod_uid=UID, container_id=CID, runtime="containerd"),
    ),
    "v2-cgroupfs": (
        f"0::/kubepods/burstable/pod{UID}/{CID}\n",
        CgroupRef(pod_uid=UID, container_id=CID, runtime=""),
    ),
    "v1-cgroupfs": (
        f"12:memory:/kubepods/burstable/pod{UID}/{CID}\n11:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}\n"
        "1:name=systemd:/kubepods/burstable/pod" + UID + "/" + CID + "\n",
        CgroupRef(pod_uid=UID, container_id=CID, runtime=""),
    ),
    "v1-systemd-docker": (
        f"4:pids:/kubepods.slice/kubepods-pod{US}.slice/docker-{CID}.scope\n3:memory:/kubepods.slice/"
        f"kubepods-pod{US}.slice/docker-{CID}.scope\n",
        CgroupRef(pod_uid=UID, container_id=CID, runtime="docker"),
    ),
    "hybrid-root-v2-with-v1-pod": (
        f"0::/\n5:devices:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{US}.slice/"
        f"crio-{CID}.scope\n",
        CgroupRef(pod_uid=UID, container_id=CID, runtime="cri-o"),
    ),
    "crio-conmon": (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{US}.slice/crio-conmon-{CID}.scope\n",
        CgroupRef(pod_uid=UID),
    ),
    "pod-level-sandbox": (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{US}.slice\n",
        CgroupRef(pod_uid=UID),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_pod_and_container_are_read_from_the_cgroup_path(name: str) -> None:
    text, expected = CASES[name]
    assert parse_cgroup(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "0::/system.slice/containerd.service\n",
        "0::/\n",
        "",
        "not a cgroup file at all",
        f"0::/user.slice/pod{UID}/{CID}\n",  # a "pod<uid>" outside kubepods is not a Kubernetes pod
    ],
    ids=["host-service", "root", "empty", "garbage", "not-kubepods"],
)
def test_processes_outside_kubernetes_pods_are_refused(text: str) -> None:
    with pytest.raises(CgroupError):
        parse_cgroup(text)


def test_proc_reader_reads_the_fake_proc_tree(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text(CASES["v2-systemd-containerd-burstable"][0])
    assert ProcCgroups(tmp_path).of(4242).pod_uid == UID


def test_proc_reader_reports_a_vanished_process_as_cgroup_error(tmp_path: Path) -> None:
    with pytest.raises(CgroupError, match="pid 7"):
        ProcCgroups(tmp_path).of(7)
