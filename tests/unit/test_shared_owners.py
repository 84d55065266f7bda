"""The rules both sides of a seam must compute the same way, each owned by one module in shared/.

Cases: the inventory KV codec (round trip; bad bytes, a bad body and another node's entry are
``EventDecodeError``s, the last a ``KeyMismatch``); ``device_counts`` (distinct per-container counts,
ascending, non-GPU containers skipped); the bucket names (the schema creates exactly
``BUCKETS``); the Kubernetes client choice (kubeconfig wins over in-cluster, nothing configured is
None, in-cluster outside a pod fails loudly instead of falling back).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgpack
import pytest
from kubernetes_asyncio.config import ConfigException

from shared.bus import BusSettings
from shared.bus.buckets import ALLOCATIONS, BUCKETS, INVENTORY, LOCKS
from shared.bus.schema import bucket_configs
from shared.codec import to_wire
from shared.errors import EventDecodeError
from shared.events import Inventory
from shared.handoff import device_counts
from shared.inventory_entries import KeyMismatch, decode_inventory_entry, encode_inventory
from shared.kube_config import kube_client
from shared.model import ContainerDevice, DeviceInfo, DeviceUUID

INVENTORY_EVENT = Inventory(
    node="n1",
    devices=(DeviceInfo(id=DeviceUUID("GPU-a"), type="NVIDIA-A100", devmem=81920),),
    heartbeat_s=5.0,
    generation=3,
)


def test_an_inventory_entry_round_trips_under_its_node() -> None:
    assert decode_inventory_entry("n1", encode_inventory(INVENTORY_EVENT)) == INVENTORY_EVENT


@pytest.mark.parametrize(
    "value",
    [b"\xc1", msgpack.packb({"node": "n1"}), msgpack.packb([1, 2]), b""],
    ids=["not-msgpack", "no-devices", "not-a-map", "empty"],
)
def test_an_unusable_inventory_entry_is_a_decode_error(value: bytes) -> None:
    with pytest.raises(EventDecodeError, match=r"(?i)inventory"):
        decode_inventory_entry("n1", value)


def test_an_inventory_entry_naming_another_node_is_a_key_mismatch() -> None:
    with pytest.raises(KeyMismatch, match="inventory entry n2 names node 'n1'"):
        decode_inventory_entry("n2", encode_inventory(INVENTORY_EVENT))


def test_the_codec_writes_what_the_generic_codec_writes() -> None:
    assert msgpack.unpackb(encode_inventory(INVENTORY_EVENT)) == to_wire(INVENTORY_EVENT)


def _slot(n: int) -> tuple[ContainerDevice, ...]:
    return tuple(ContainerDevice(uuid=DeviceUUID(f"GPU-{i}"), usedmem=1, usedcores=1) for i in range(n))


@pytest.mark.parametrize(
    ("sizes", "counts"),
    [((), []), ((0,), []), ((1,), [1]), ((2, 1, 2, 0, 4), [1, 2, 4]), ((3, 3, 3), [3])],
)
def test_device_counts_are_the_distinct_gpu_container_sizes_ascending(
    sizes: tuple[int, ...], counts: list[int]
) -> None:
    assert device_counts(tuple(_slot(n) for n in sizes)) == counts


def test_the_schema_creates_exactly_the_named_buckets() -> None:
    assert [c.name for c in bucket_configs(BusSettings())] == [f"KV_{b}" for b in BUCKETS]
    assert BUCKETS == (INVENTORY, ALLOCATIONS, LOCKS)


@dataclass(frozen=True)
class Where:
    kubeconfig: str | None = None
    in_cluster: bool = False


def _kubeconfig(tmp_path: Path, server: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    return str(path)


async def test_a_kubeconfig_wins_over_in_cluster(tmp_path: Path) -> None:
    kubeconfig = _kubeconfig(tmp_path, "https://10.1.2.3:6443")
    kube = await kube_client(Where(kubeconfig=kubeconfig, in_cluster=True))
    assert kube is not None
    try:
        assert kube.host == "https://10.1.2.3:6443"
    finally:
        await kube.close()


async def test_without_kubeconfig_or_in_cluster_there_is_no_api() -> None:
    assert await kube_client(Where()) is None
    assert await kube_client(Where(kubeconfig="")) is None


async def test_in_cluster_outside_a_pod_fails_instead_of_falling_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigException):
        await kube_client(Where(in_cluster=True))
