"""MIG on the node-agent: profile discovery, registration, instances and the Allocate answer.

Sources (HAMi v2.10): ``pkg/device-plugin/nvidiadevice/nvinternal/plugin/register.go``
(``discoverMigProfiles``: the allowlist picks profile names per model, NVML gives memory, SMs and
placements, core = ceil(SMs x 100 / the largest profile's SMs); a card in mig mode registers its
unscaled memory, 100 cores, count = the most instances of an offered profile, and is skipped
without a profile), ``charts/hami/templates/scheduler/device-configmap.yaml`` (the default
allowlist), ``plugin/migmgr.go`` (``EnsureAllocation``: exactly the reserved placement, never
another; ``profileSliceKey``), ``plugin/server.go`` (Allocate in mig mode: NVIDIA_VISIBLE_DEVICES
lists MIG UUIDs, no HAMi-core limits or mounts) and ``plugin/util.go`` (a failed container rolls
back the instances it created).

Matrix: model matching (whole tokens), profile figures, counts, the ``:mig`` spec, the simulated
card's NVML rules (legal placement, overlap, unknown profile, ids), the instance registry
(reuse, rollback, release) and the response builder.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.node_agent.allocate import build_mig_response
from services.node_agent.discovery import PhysicalDevice
from services.node_agent.errors import AllocateFailed, SimSpecError
from services.node_agent.inventory import device_infos, node_resources, replicas
from services.node_agent.mig import (
    MigError,
    MigInstances,
    allowed_profiles,
    card_profiles,
    instance_count,
    model_matches,
)
from services.node_agent.settings import NodeAgentSettings
from services.node_agent.simulated import MIG_MODELS, SimulatedSource, build_devices, parse_spec
from shared.model import (
    Allocation,
    AllocationState,
    ContainerDevice,
    DeviceUUID,
    MigPlacement,
    MigSlice,
    NodeName,
    PodUID,
)


def at(start: int, size: int) -> MigPlacement:
    return MigPlacement(start=start, size=size)


@pytest.mark.parametrize(
    ("entry", "model", "match"),
    [
        ("A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB", True),
        ("A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", True),
        ("H20", "NVIDIA-H20", True),
        ("H20", "NVIDIA-H200", False),  # HAMi's strings.Contains would match
        ("H200", "NVIDIA-H200", True),
        ("A30", "NVIDIA-A30", True),
        ("", "NVIDIA-A30", False),
    ],
)
def test_allowlist_models_match_on_whole_tokens(entry: str, model: str, match: bool) -> None:
    assert model_matches(entry, model) is match


def test_default_allowlist_is_hamis_chart() -> None:
    assert allowed_profiles("NVIDIA-A100-SXM4-80GB") == ("1g.10gb", "2g.20gb", "3g.40gb", "7g.79gb")
    assert allowed_profiles("NVIDIA-A100-SXM4-40GB") == ("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb")
    assert allowed_profiles("NVIDIA-A30") == ("1g.6gb", "2g.12gb", "4g.24gb")
    assert allowed_profiles("NVIDIA-H200") == ("1g.18gb", "2g.35gb", "3g.71gb", "7g.141gb")
    assert allowed_profiles("NVIDIA-Tesla T4") == ()


def test_profiles_take_nvmls_figures_and_hamis_core_share() -> None:
    profiles = card_profiles("NVIDIA-A100-SXM4-80GB", MIG_MODELS["A100-80GB"])
    assert [(p.name, p.memory_mb, p.core, p.slice_count) for p in profiles] == [
        ("1g.10gb", 9728, 15, 1),  # ceil(14 * 100 / 98)
        ("2g.20gb", 19968, 29, 2),
        ("3g.40gb", 40192, 43, 3),
        ("7g.79gb", 80640, 100, 7),
    ]
    assert [p.start for p in profiles[0].placements] == list(range(7))
    assert profiles[2].placements == (at(0, 4), at(4, 4))
    assert instance_count(MIG_MODELS["A100-80GB"], profiles) == 7
    a30 = card_profiles("NVIDIA-A30", MIG_MODELS["A30"])
    assert [(p.name, p.core) for p in a30] == [("1g.6gb", 25), ("2g.12gb", 50), ("4g.24gb", 100)]
    assert instance_count(MIG_MODELS["A30"], a30) == 4


def test_mig_spec_marks_cards_and_is_refused_for_models_without_mig() -> None:
    ((count, model),) = parse_spec("2xA100-80GB:mig")
    assert count == 2 and model.mig == MIG_MODELS["A100-80GB"]
    devices = build_devices("n1", "A100-80GB:mig+T4")
    assert [(d.mig_enabled, bool(d.mig_capabilities)) for d in devices] == [(True, True), (False, False)]
    with pytest.raises(SimSpecError, match="'T4' has no MIG mode; MIG models: A100-40GB"):
        parse_spec("T4:mig")


def test_a_mig_card_registers_unscaled_memory_100_cores_and_its_instance_count() -> None:
    settings = NodeAgentSettings(
        node_name="n1", device_split_count=10, device_memory_scaling=2.0, device_core_scaling=2.0
    )
    mig, shared = device_infos(build_devices("n1", "A100-80GB:mig+A100-80GB"), settings, frozenset())
    assert (mig.mode, mig.count, mig.devmem, mig.devcore) == ("mig", 7, 81920, 100)
    assert [p.name for p in mig.mig_profiles] == ["1g.10gb", "2g.20gb", "3g.40gb", "7g.79gb"]
    assert (shared.mode, shared.count, shared.devmem, shared.devcore, shared.mig_profiles) == (
        "hami-core", 10, 163840, 200, ()
    )
    assert len(replicas([mig, shared], with_numa=False)) == 17


def test_a_mig_card_without_an_allowed_profile_is_not_registered() -> None:
    odd = PhysicalDevice(uuid=DeviceUUID("GPU-x"), index=0, name="Foo", memory_mib=1000, mig_enabled=True)
    assert device_infos([odd], NodeAgentSettings(node_name="n1"), frozenset()) == ()
    in_mig_mode = NodeAgentSettings(node_name="n1", operating_mode="mig")
    assert device_infos(build_devices("n1", "T4"), in_mig_mode, frozenset()) == ()


# --- the simulated card, as NVML behaves ---------------------------------------------------------


async def test_the_simulated_card_creates_only_legal_free_placements() -> None:
    source = SimulatedSource("n1", "A100-80GB:mig+T4")
    gpu, plain = (d.uuid for d in source.devices())
    first = await source.create_instance(gpu, "1g.10gb", at(6, 1))
    assert first.mig_uuid.startswith("MIG-") and (first.gpu_instance_id, first.compute_instance_id) == (1, 0)
    second = await source.create_instance(gpu, "3g.40gb", at(0, 4))
    assert second.gpu_instance_id == 2 and second.mig_uuid != first.mig_uuid
    with pytest.raises(MigError, match="Insufficient Resources"):
        await source.create_instance(gpu, "3g.40gb", at(4, 4))
    with pytest.raises(MigError, match="invalid placement"):
        await source.create_instance(gpu, "2g.20gb", at(1, 2))
    with pytest.raises(MigError, match=r"unsupported MIG profile '5g\.50gb'"):
        await source.create_instance(gpu, "5g.50gb", at(0, 4))
    with pytest.raises(MigError, match="not a card in MIG mode"):
        await source.create_instance(plain, "1g.10gb", at(0, 1))
    await source.destroy_instance(first)
    await source.destroy_instance(first)  # already gone: nothing to do, as HAMi treats NOT_FOUND
    assert source.instances(gpu) == (second,)
    again = await source.create_instance(gpu, "1g.10gb", at(6, 1))
    assert again.gpu_instance_id == 1


def mig_card(gpu: DeviceUUID, profile: str, start: int, size: int) -> ContainerDevice:
    return ContainerDevice(
        uuid=gpu, usedmem=9728, usedcores=15, mig=MigSlice(profile=profile, placement=at(start, size))
    )


async def test_instances_are_reused_rolled_back_and_released_per_pod() -> None:
    source = SimulatedSource("n1", "A100-80GB:mig")
    (gpu,) = (d.uuid for d in source.devices())
    registry = MigInstances(source)
    pod = PodUID("pod-a")
    two = [mig_card(gpu, "1g.10gb", 6, 1), mig_card(gpu, "1g.10gb", 5, 1)]
    uuids = await registry.ensure(pod, "c0", two)
    assert len(set(uuids)) == 2 and len(source.instances(gpu)) == 2
    assert await registry.ensure(pod, "c0", two) == uuids  # the kubelet's retry reuses them
    with pytest.raises(AllocateFailed, match=r"container c1: .*Insufficient Resources"):
        await registry.ensure(pod, "c1", [mig_card(gpu, "1g.10gb", 0, 1), mig_card(gpu, "3g.40gb", 4, 4)])
    assert len(source.instances(gpu)) == 2  # c1's 1g at slice 0 was rolled back
    assert await registry.release(pod) == 2
    assert source.instances(gpu) == () and registry.held(pod) == ()


async def test_a_node_without_mig_support_refuses_a_mig_decision() -> None:
    with pytest.raises(AllocateFailed, match="cannot create one"):
        await MigInstances(None).ensure(PodUID("p"), "c0", [mig_card(DeviceUUID("GPU-0"), "1g.10gb", 6, 1)])


def test_the_container_sees_only_its_mig_uuids() -> None:
    cards = [mig_card(DeviceUUID("GPU-0"), "1g.10gb", 6, 1), mig_card(DeviceUUID("GPU-0"), "1g.10gb", 5, 1)]
    response = build_mig_response(cards, ["MIG-a", "MIG-b"])
    assert (dict(response.envs), response.mounts) == ({"NVIDIA_VISIBLE_DEVICES": "MIG-a,MIG-b"}, ())
    with pytest.raises(AllocateFailed, match="mixes MIG instances and shared cards"):
        build_mig_response(cards, ["MIG-a", ""])


# --- memory and cores in the Node's capacity -------------------------------------------------------


def test_node_resources_total_every_card_and_allocatable_only_healthy_ones() -> None:
    """capacity: every registered card; allocatable: the healthy ones (as the kubelet treats a device
    plugin's devices); memory in the scheduler's memory-factor units."""
    settings = NodeAgentSettings(node_name="n1", device_memory_scaling=1.5)
    infos = device_infos(build_devices("n1", "A100-80GB:mig+2xA10"), settings, frozenset())
    sick = {infos[2].id}
    cards = build_devices("n1", "A100-80GB:mig+2xA10")
    status = node_resources(device_infos(cards, settings, sick), settings)
    assert status == {
        "capacity": {"nvidia.com/gpumem": str(81920 + 2 * 36864), "nvidia.com/gpucores": "300"},
        "allocatable": {"nvidia.com/gpumem": str(81920 + 36864), "nvidia.com/gpucores": "200"},
    }
    renamed = NodeAgentSettings(
        node_name="n1",
        memory_factor=1000,
        resource_memory_name="hami.io/mem", resource_cores_name="hami.io/c",
    )
    assert node_resources(infos[1:2], renamed)["capacity"] == {"hami.io/mem": "36", "hami.io/c": "100"}


async def test_a_restarted_agent_adopts_reserved_instances_and_destroys_the_others() -> None:
    """HAMi ``plugin/migmgr.go`` ``AdoptAllocation`` / ``ReconcileActiveAllocations``; an unread
    ledger (``destroy=False``) never destroys (``docs/develop/dynamic-mig-migration.md``)."""
    source = SimulatedSource("n1", "A100-80GB:mig")
    (gpu,) = (d.uuid for d in source.devices())
    kept = await source.create_instance(gpu, "1g.10gb", at(6, 1))
    await source.create_instance(gpu, "3g.40gb", at(0, 4))
    entry = Allocation(
        pod_uid=PodUID("pod-a"),
        namespace="ns",
        name="a",
        node=NodeName("n1"),
        devices=((mig_card(gpu, "1g.10gb", 6, 1),),),
        containers=("c0",),
    )
    three_g = ((mig_card(gpu, "3g.40gb", 0, 4),),)
    failed = replace(entry, pod_uid=PodUID("pod-b"), state=AllocationState.FAILED, devices=three_g)
    assert await MigInstances(source).recover([gpu], [entry, failed], destroy=False) == (1, 0)
    assert len(source.instances(gpu)) == 2
    registry = MigInstances(source)
    assert await registry.recover([gpu], [entry, failed], destroy=True) == (1, 1)
    assert source.instances(gpu) == (kept,)
    assert await registry.ensure(PodUID("pod-a"), "c0", [mig_card(gpu, "1g.10gb", 6, 1)]) == (kept.mig_uuid,)
    assert await registry.release(PodUID("pod-a")) == 1 and source.instances(gpu) == ()
