"""The node-agent's checks of outside input, as pure functions and settings.

Cases: pod UIDs and container names as Kubernetes makes them (RFC 4122, a static pod's md5 hex,
DNS-1123 labels) accepted, anything else (NUL, '_', upper case, too long) refused; one GPU twice
in a container; limits above the card's registered memory or cores; ``decided_at`` not finite or
too far ahead of the node's clock; an Allocate call planned all or none; per-node config and
settings numbers that are not finite, not whole, booleans or beyond the bounds.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from services.node_agent.allocate import is_container_name, is_pod_uid
from services.node_agent.errors import DecisionMismatch
from services.node_agent.pending import (
    MAX_DECIDED_AHEAD_S,
    PendingTable,
    decision_problem,
    time_problem,
)
from services.node_agent.settings import NodeAgentSettings, apply_node_config, load, validate
from shared.config import SettingsError
from shared.model import Allocation, ContainerDevice, DeviceInfo, DeviceUUID, NodeName, PodUID

A = DeviceUUID("GPU-aaaaaaaa-0000-0000-0000-000000000001")
B = DeviceUUID("GPU-bbbbbbbb-0000-0000-0000-000000000002")
CARDS = {
    A: DeviceInfo(id=A, type="NVIDIA-A10", devmem=24576, devcore=100),
    B: DeviceInfo(id=B, type="NVIDIA-A10", devmem=24576, devcore=50),
}


def dev(uuid: DeviceUUID, mem: int = 1000, cores: int = 10) -> ContainerDevice:
    return ContainerDevice(uuid=uuid, usedmem=mem, usedcores=cores)


def decision(*slots: tuple[ContainerDevice, ...], uid: str = "p", decided_at: float = 0.0) -> Allocation:
    return Allocation(
        pod_uid=PodUID(uid),
        namespace="ns",
        name="p",
        node=NodeName("n1"),
        devices=slots,
        containers=tuple(f"c{i}" for i in range(len(slots))),
        decided_at=decided_at,
    )


@pytest.mark.parametrize(
    "uid",
    [
        "0b5d9f3e-6f0c-4a8e-9d2b-1c3e5f7a9b0d",
        "0B5D9F3E-6F0C-4A8E-9D2B-1C3E5F7A9B0D",
        "d41d8cd98f00b204e9800998ecf8427e",  # a static pod's
        "uid-web-1a2b3c",  # as tests and simulators make them
        "p",
    ],
)
def test_pod_uids_kubernetes_makes_are_accepted(uid: str) -> None:
    assert is_pod_uid(uid) and decision_problem(decision((dev(A),), uid=uid), CARDS) is None


@pytest.mark.parametrize("uid", ["", "uid-a\x00b", "a_b", "..", "a/b", "-a", "a b", "a\n", "é", "x" * 129])
def test_other_pod_uids_are_refused(uid: str) -> None:
    assert not is_pod_uid(uid)
    problem = decision_problem(decision((dev(A),), uid=uid), CARDS)
    assert problem is not None and "not a Kubernetes UID" in problem


@pytest.mark.parametrize("name", ["c\x00", "Main", "a_b", "-a", "a-", "x" * 64, "c\n", ""])
def test_container_names_that_are_not_dns_labels_are_refused(name: str) -> None:
    assert not is_container_name(name)
    broken = dataclasses.replace(decision((dev(A),)), containers=(name,))
    problem = decision_problem(broken, CARDS)
    assert problem is not None and "DNS-1123" in problem


def test_dns_labels_are_container_names() -> None:
    assert all(is_container_name(n) for n in ("main", "c0", "init-data", "x" * 63, "0"))


def test_one_gpu_twice_in_a_container_is_refused_but_once_in_each_of_two_is_fine() -> None:
    problem = decision_problem(decision((dev(A), dev(A, 2000))), CARDS)
    assert problem is not None and "the same GPU twice" in problem
    assert decision_problem(decision((dev(A),), (dev(A),)), CARDS) is None


@pytest.mark.parametrize(
    ("device", "refused"),
    [
        (dev(A, 24576, 100), False),
        (dev(A, 24577), True),
        (dev(A, 2**63), True),
        (dev(B, cores=50), False),
        (dev(B, cores=51), True),
    ],
)
def test_limits_are_bounded_by_what_the_card_registered(device: ContainerDevice, refused: bool) -> None:
    problem = decision_problem(decision((device,)), CARDS)
    assert (problem is not None) == refused
    if refused:
        assert "exceeds the card's registered" in (problem or "")


@pytest.mark.parametrize(
    ("decided_at", "refused"),
    [
        (math.nan, True),
        (math.inf, True),
        (1e300, True),
        (1000.0 + MAX_DECIDED_AHEAD_S + 1, True),
        (1000.0 + MAX_DECIDED_AHEAD_S, False),  # clock skew up to the bound is tolerated
        (0.0, False),
    ],
)
def test_a_decision_time_must_be_finite_and_not_far_ahead_of_the_node(
    decided_at: float, refused: bool
) -> None:
    assert (time_problem(decided_at, now=1000.0) is not None) == refused


def test_an_allocate_call_is_planned_all_or_none() -> None:
    table = PendingTable("n1")
    table.add(decision((dev(A),), (dev(B),)))
    assert [s.index for s in table.plan([1, 1])] == [0, 1]
    with pytest.raises(DecisionMismatch):
        table.plan([1, 2])
    assert table.choose(1).index == 0  # nothing was recorded by either plan


# -- settings ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "setting"),
    [
        ({"devicesplitcount": math.inf}, "nodeconfig.devicesplitcount"),
        ({"devicesplitcount": 2.9}, "nodeconfig.devicesplitcount"),
        ({"devicesplitcount": True}, "nodeconfig.devicesplitcount"),
        ({"devicememoryscaling": math.nan}, "nodeconfig.devicememoryscaling"),
        ({"devicecorescaling": math.inf}, "nodeconfig.devicecorescaling"),
        ({"filterdevices": {"index": [math.inf]}}, "nodeconfig.filterdevices.index"),
    ],
)
def test_nodeconfig_numbers_that_are_not_finite_or_whole_are_refused(
    entry: dict[str, object], setting: str
) -> None:
    with pytest.raises(SettingsError, match=f"setting {setting}"):
        apply_node_config(NodeAgentSettings(node_name="n"), {"nodeconfig": [{"name": "n", **entry}]})


def test_a_whole_float_is_a_count() -> None:
    doc = {"nodeconfig": [{"name": "n", "devicesplitcount": 4.0}]}
    assert apply_node_config(NodeAgentSettings(node_name="n"), doc).device_split_count == 4


@pytest.mark.parametrize("value", [math.nan, math.inf, 0.0, 1e300])
@pytest.mark.parametrize("field", ["device_memory_scaling", "device_core_scaling"])
def test_scaling_must_be_finite_positive_and_bounded(field: str, value: float) -> None:
    with pytest.raises(SettingsError, match=field.replace("_", " ")):
        validate(NodeAgentSettings(node_name="n", **{field: value}))  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_scaling_from_the_environment_must_be_finite(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("GPUBUS_NODE_AGENT_DEVICE_MEMORY_SCALING", value)
    with pytest.raises(SettingsError, match="setting device_memory_scaling"):
        load({"node_name": "n"})
