"""DRA mode's pure core (services/node_agent/dra.py): the ResourceSlice, claim parsing, CDI specs."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from services.node_agent import dra
from services.node_agent.allocate import AllocateConfig, build_container_response
from services.node_agent.settings import NodeAgentSettings, validate
from shared.config import SettingsError
from shared.model import ContainerDevice, DeviceInfo, DeviceUUID

CARDS = (
    DeviceInfo(id=DeviceUUID("GPU-aaaa"), index=0, type="NVIDIA-A100-SXM4-80GB", devmem=81920, numa=0),
    DeviceInfo(id=DeviceUUID("GPU-bbbb"), index=1, type="NVIDIA-A100-SXM4-80GB", devmem=81920, numa=1),
)
UID = "9b7c045f-95b9-4fec-a3ee-c6925b01e93e"


def _claim(*results: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "c", "uid": UID},
            "status": {"allocation": {"devices": {"results": list(results)}},
                       "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-uid"}]}}


def _result(device: str = "gpu-1", pool: str = "node-1", **consumed: str) -> dict[str, Any]:
    return {"request": "gpu", "driver": "gpubus.io", "pool": pool, "device": device, "shareID": "s-1",
            "consumedCapacity": consumed}


def test_slice_has_every_card_shareable_with_consumable_memory_and_cores() -> None:
    found = dra.resource_slice("node-1", CARDS[::-1], 3)
    assert found["metadata"]["name"] == "node-1-gpubus-io"
    spec = found["spec"]
    assert spec["pool"] == {"name": "node-1", "generation": 3, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"]
    device = spec["devices"][1]
    assert device["allowMultipleAllocations"] is True
    assert device["attributes"] == {"uuid": {"string": "GPU-bbbb"},
                                    "productName": {"string": "NVIDIA-A100-SXM4-80GB"},
                                    "index": {"int": 1}, "numa": {"int": 1}}
    assert device["capacity"]["memory"] == {"value": "80Gi", "requestPolicy": {
        "default": "80Gi", "validRange": {"min": "1Mi", "max": "80Gi", "step": "1Mi"}}}
    assert device["capacity"]["cores"]["requestPolicy"] == {
        "default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}}
    assert "taints" not in device


def test_unhealthy_card_is_tainted_and_the_change_is_seen() -> None:
    sick_cards = (CARDS[0], dataclasses.replace(CARDS[1], health=False))
    healthy = dra.resource_slice("n", CARDS, 1)
    sick = dra.resource_slice("n", sick_cards, 1)
    assert sick["spec"]["devices"][1]["taints"] == [
        {"key": "gpubus.io/unhealthy", "value": "true", "effect": "NoSchedule"}]
    assert not dra.same_devices(healthy, sick)
    # the API server's timeAdded is no change
    sick["spec"]["devices"][1]["taints"][0]["timeAdded"] = "2026-01-01T00:00:00Z"
    assert dra.same_devices(sick, dra.resource_slice("n", sick_cards, 9))


@pytest.mark.parametrize(("mib", "text"), [(81920, "80Gi"), (1, "1Mi"), (1536, "1536Mi"), (1 << 20, "1Ti")])
def test_memory_quantities_are_written_as_the_api_server_writes_them(mib: int, text: str) -> None:
    assert dra.mib_quantity(mib) == text


def test_claim_devices_take_consumed_capacity() -> None:
    [found] = dra.claim_devices(_claim(_result(memory="10Gi", cores="30")), node="node-1", devices=CARDS)
    assert found == dra.ClaimDevice(request="gpu", pool="node-1", device="gpu-1", uuid=DeviceUUID("GPU-bbbb"),
                                    index=1, memory_mib=10240, cores=30, share_id="s-1")
    [whole] = dra.claim_devices(_claim(_result()), node="node-1", devices=CARDS)
    assert (whole.memory_mib, whole.cores) == (81920, 100)
    assert dra.reserved_pods(_claim()) == (dra.ClaimRef(namespace="ns", name="p", uid="pod-uid"),)


@pytest.mark.parametrize(("claim", "error"), [
    ({"status": {}}, "not allocated"),
    (_claim(_result(pool="node-2")), "not 'node-1'"),
    (_claim(_result(device="gpu-7")), "not on node-1"),
    (_claim(_result(memory="lots")), "consumed capacity"),
    (_claim(_result(memory="100Gi")), "outside the card"),
    (_claim(_result(memory="1Gi", cores="101")), "outside the card"),
    (_claim({**_result(), "driver": "other.io"}), "no device of driver gpubus.io"),
])
def test_claims_this_node_cannot_prepare_are_refused(claim: dict[str, Any], error: str) -> None:
    with pytest.raises(dra.BadClaim, match=error):
        dra.claim_devices(claim, node="node-1", devices=CARDS)


def test_cdi_spec_carries_what_extender_allocate_gives() -> None:
    config = AllocateConfig(hook_path="/usr/local")
    claim = _claim(_result(memory="10Gi", cores="30"), _result(device="gpu-0", memory="5Gi"))
    devices = dra.claim_devices(claim, node="node-1", devices=CARDS)
    spec = dra.cdi_spec(UID, devices, config, cache_id="cache")
    assert spec["cdiVersion"] == dra.CDI_VERSION and spec["kind"] == "gpubus.io/gpu"
    [device] = spec["devices"]
    assert device["name"] == UID and dra.cdi_device_id(UID) == f"gpubus.io/gpu={UID}"
    extender = build_container_response(
        [ContainerDevice(uuid=DeviceUUID("GPU-aaaa"), usedmem=5120, usedcores=0, idx=0),
         ContainerDevice(uuid=DeviceUUID("GPU-bbbb"), usedmem=10240, usedcores=30, idx=1)],
        config, pod_uid=UID, container="dra", cache_id="cache")
    assert device["containerEdits"]["env"] == [f"{k}={v}" for k, v in extender.envs.items()]
    env = dict(e.split("=", 1) for e in device["containerEdits"]["env"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-aaaa,GPU-bbbb"
    assert (env["CUDA_DEVICE_MEMORY_LIMIT_0"], env["CUDA_DEVICE_MEMORY_LIMIT_1"]) == ("5120m", "10240m")
    mounts = {m["containerPath"]: m for m in device["containerEdits"]["mounts"]}
    assert mounts["/etc/ld.so.preload"]["hostPath"] == "/usr/local/vgpu/ld.so.preload"
    assert "ro" in mounts["/etc/ld.so.preload"]["options"]
    assert mounts["/usr/local/vgpu"]["hostPath"] == f"/usr/local/vgpu/containers/{UID}_dra"


@pytest.mark.parametrize(("changes", "error"), [
    ({"mode": "both"}, "mode must be one of extender, dra, node-label"),
    ({"mode": "dra", "dra_driver": "a/b"}, "dra driver"),
    ({"mode": "dra", "dra_register_wait_s": -1.0}, "dra_register_wait_s"),
])
def test_bad_dra_settings_are_refused(changes: dict[str, Any], error: str) -> None:
    with pytest.raises(SettingsError, match=error):
        validate(NodeAgentSettings(node_name="n", **changes))
