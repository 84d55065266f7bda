"""Whatever the scheduler's Fit decides, the node-agent allocates: one owner for the container rules.

Nodes are built by the node-agent's own inventory code from simulated cards (what it advertises,
so what its checks compare against): shared cards and cards in mig mode side by side, A100, H100
and A30 geometry, memory and core scaling, unhealthy cards, and random usage (slots, memory, cores;
MIG instances of random profiles at legal, non-overlapping placements). Pods: one to three
containers (the first sometimes an init container) of one to three cards, memory in MiB or %,
cores, sometimes ``nvidia.com/vgpu-mode``, under every GPU policy.

Property: when Fit places a pod, the node-agent's check of a decision from the bus
(``decision_problem``) finds nothing wrong, every container's Allocate answer builds as the
handoff builds it (MIG UUIDs for a MIG container, HAMi-core limits for a shared one), and every
MIG instance of the pod, init containers' included, can be made beside the card's others.

Tables: an init container's MIG instance beside the app container's; HAMi's documented pod
(``nvidia.com/gpu: 2``, ``gpumem-percentage: 50``, ``gpucores: 30``) on a node with a card in mig
mode beside shared ones, with the MIG card scanned first and last: never mixed, placed on the
shared cards while they have room, Pending with each card's reason after; the rule's refusals.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.node_agent.allocate import (
    AllocateConfig,
    ContainerResponse,
    build_container_response,
    build_mig_response,
)
from services.node_agent.inventory import device_infos
from services.node_agent.pending import decision_problem
from services.node_agent.settings import NodeAgentSettings
from services.node_agent.simulated import build_devices
from services.scheduler.fit import NodeState, fit_pod
from shared.allocation_rules import MIXED_KINDS, CardKind, container_problem, device_kind
from shared.model import (
    PERCENT_UNSET,
    Allocation,
    ContainerDevice,
    ContainerRequest,
    ContainerSpec,
    DeviceInfo,
    DeviceUsage,
    DeviceUUID,
    MigPlacement,
    MigSlice,
    NodeName,
    PodDevices,
    PodRequest,
    PodUID,
)

CARDS = ["A100-80GB:mig", "A100-80GB", "H100-80GB:mig", "H100-80GB", "A30:mig", "A10", "T4"]


def advertised(spec: str, memory_scaling: float = 1.0, core_scaling: float = 1.0) -> tuple[DeviceInfo, ...]:
    settings = NodeAgentSettings(
        node_name="n1", device_memory_scaling=memory_scaling, device_core_scaling=core_scaling
    )
    return device_infos(build_devices("n1", spec), settings, frozenset())


@st.composite
def mig_usage(draw: st.DrawFn, card: DeviceInfo) -> DeviceUsage:
    held: list[tuple[int, int, MigPlacement]] = []
    for _ in range(draw(st.integers(0, 6))):
        profile = draw(st.sampled_from(card.mig_profiles))
        placement = draw(st.sampled_from(profile.placements))
        if len(held) < card.count and not any(placement.overlaps(p) for _, _, p in held):
            held.append((profile.memory_mb, profile.core, placement))
    return DeviceUsage(
        used=len(held),
        usedmem=sum(m for m, _, _ in held),
        usedcores=sum(c for _, c, _ in held),
        mig=tuple(p for _, _, p in held),
    )


@st.composite
def shared_usage(draw: st.DrawFn, card: DeviceInfo) -> DeviceUsage:
    used = draw(st.integers(0, min(card.count, 3)))
    if used == 0:
        return DeviceUsage()
    return DeviceUsage(
        used=used,
        usedmem=draw(st.integers(0, card.devmem)),
        usedcores=draw(st.sampled_from([0, 30, 60, card.devcore])),
    )


@st.composite
def nodes(draw: st.DrawFn) -> NodeState:
    spec = "+".join(draw(st.lists(st.sampled_from(CARDS), min_size=1, max_size=4)))
    cards = advertised(spec, draw(st.sampled_from([1.0, 1.5])), draw(st.sampled_from([1.0, 2.0])))
    sick = draw(st.sets(st.integers(0, len(cards) - 1), max_size=1))
    cards = tuple(c if c.index not in sick else DeviceInfo(**{**_fields(c), "health": False}) for c in cards)
    usage = tuple(draw(mig_usage(c) if c.mig_profiles else shared_usage(c)) for c in cards)
    return NodeState(name=NodeName("n1"), devices=cards, usage=usage)


def _fields(card: DeviceInfo) -> dict[str, object]:
    return {name: getattr(card, name) for name in DeviceInfo.__slots__}


requests = st.builds(
    ContainerRequest,
    nums=st.integers(1, 3),
    memreq=st.sampled_from([0, 1000, 8000, 20000, 30000]),
    mempercentagereq=st.sampled_from([PERCENT_UNSET, 10, 50, 100]),
    coresreq=st.sampled_from([0, 30, 100]),
)
annotations = st.fixed_dictionaries(
    {"hami.io/gpu-scheduler-policy": st.sampled_from(["spread", "binpack", "mutex", "topology-aware"])},
    optional={"nvidia.com/vgpu-mode": st.sampled_from(["mig", "hami-core", "hami-core,mig"])},
)


def make_pod(reqs: list[ContainerRequest], notes: dict[str, str], init: bool = False) -> PodRequest:
    return PodRequest(
        namespace="ns",
        name="p",
        uid=PodUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"),
        containers=tuple(
            ContainerSpec(name=f"c{i}", init=init and i == 0, request=r) for i, r in enumerate(reqs)
        ),
        annotations=notes,
    )


def decision(pod: PodRequest, devices: PodDevices) -> Allocation:
    return Allocation(
        pod_uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        node=NodeName("n1"),
        devices=devices,
        containers=tuple(c.name for c in pod.containers),
        init_count=sum(1 for c in pod.containers if c.init),
    )


def allocate_answer(pod: PodRequest, container: str, slot: tuple[ContainerDevice, ...]) -> ContainerResponse:
    """What the handoff answers the kubelet with: the MIG UUIDs the instance registry gives a
    container with MIG instances ("" for a shared card), else HAMi-core's limits."""
    mig = tuple(f"MIG-{k}" if d.mig is not None else "" for k, d in enumerate(slot))
    if any(mig):
        return build_mig_response(slot, mig)
    return build_container_response(
        slot, AllocateConfig(), pod_uid=pod.uid, container=container, cache_id="cache"
    )


@settings(max_examples=400, deadline=None)
@given(nodes(), st.lists(requests, min_size=1, max_size=3), annotations, st.booleans())
def test_every_decision_fit_makes_the_node_agent_allocates(
    node: NodeState, reqs: list[ContainerRequest], notes: dict[str, str], init: bool
) -> None:
    pod = make_pod(reqs, notes, init)
    fit = fit_pod(node, pod)
    if not fit.fit:
        return
    cards = {c.id: c for c in node.devices}
    assert decision_problem(decision(pod, fit.devices), cards) is None
    for spec, slot in zip(pod.containers, fit.devices, strict=True):
        assert len({device_kind(d) for d in slot}) == 1
        response = allocate_answer(pod, spec.name, slot)
        assert response.envs["NVIDIA_VISIBLE_DEVICES"]
    # the card makes every container's instance at admission, init containers' too, beside the
    # instances other pods hold: NVML refuses one that overlaps any of them
    live = {c.id: list(u.mig) for c, u in zip(node.devices, node.usage, strict=True)}
    for d in (d for slot in fit.devices for d in slot if d.mig is not None):
        assert not any(d.mig.placement.overlaps(p) for p in live[d.uuid]), (d, live[d.uuid])
        live[d.uuid].append(d.mig.placement)


# --- HAMi's documented pod on a mixed node ------------------------------------------------------

DOC = ContainerRequest(nums=2, mempercentagereq=50, coresreq=30)


def doc_pod() -> PodRequest:
    return make_pod([DOC], {})


def kinds(slot: tuple[ContainerDevice, ...]) -> set[CardKind]:
    return {device_kind(d) for d in slot}


def test_the_documented_pod_takes_two_shared_cards_when_the_mig_card_is_scanned_first() -> None:
    """Index ascending is the last tiebreak, and the scan runs from the end: the MIG card (index 2)
    comes first; its one 7g instance and a shared card were the mixed decision Allocate refused."""
    cards = advertised("2xA100-80GB+A100-80GB:mig")
    fit = fit_pod(NodeState(name=NodeName("n1"), devices=cards), doc_pod())
    assert fit.fit
    (slot,) = fit.devices
    assert kinds(slot) == {CardKind.SHARED}
    assert sorted(d.idx for d in slot) == [0, 1]
    assert [(d.usedmem, d.usedcores) for d in slot] == [(40960, 30), (40960, 30)]


def test_the_documented_pod_stays_pending_with_each_cards_reason_when_the_shared_cards_are_full() -> None:
    cards = advertised("A100-80GB:mig+2xA100-80GB")
    full = DeviceUsage(used=2, usedmem=81920, usedcores=60)
    node = NodeState(name=NodeName("n1"), devices=cards, usage=(DeviceUsage(), full, full))
    fit = fit_pod(node, doc_pod())
    assert not fit.fit
    # the MIG card gives one 7g.79gb instance (50 % is 40960 MiB, more than a 3g's 40192), not two
    assert fit.reason == (
        "1/3 AllocatedCardsInsufficientRequest, 1/3 CardMigTopologyInfeasible, 2/3 CardInsufficientMemory"
    )


def test_a_small_request_takes_instances_of_the_mig_card_alone_when_the_scan_meets_it_first() -> None:
    cards = advertised("A100-80GB+A100-80GB:mig")
    fit = fit_pod(
        NodeState(name=NodeName("n1"), devices=cards), make_pod([ContainerRequest(nums=3, memreq=8000)], {})
    )
    (slot,) = fit.devices
    assert kinds(slot) == {CardKind.MIG} and {d.idx for d in slot} == {1}
    assert [d.mig.placement.start for d in slot if d.mig is not None] == [6, 5, 4]


def test_an_init_containers_instance_and_the_app_containers_never_overlap() -> None:
    """HAMi fits init containers on a fresh copy of the node, so both once got 1g at slice 6; the node
    makes both instances when the pod is admitted, and NVML refused the second."""
    cards = advertised("A100-80GB:mig")
    request = ContainerRequest(nums=1, memreq=8000)
    pod = make_pod([request, request], {}, init=True)
    fit = fit_pod(NodeState(name=NodeName("n1"), devices=cards), pod)
    starts = [d.mig.placement.start for slot in fit.devices for d in slot if d.mig is not None]
    assert starts == [6, 5]
    shared = fit.devices[0] + fit.devices[0]
    table = {c.id: c for c in cards}
    assert decision_problem(decision(pod, (fit.devices[0], fit.devices[0])), table) == (
        f"containers c0 and c1 are given overlapping MIG instances on GPU {cards[0].id}"
    )
    assert container_problem("main", shared, table) is not None


def test_the_rule_refuses_a_mixed_container_on_both_sides() -> None:
    cards = advertised("A100-80GB:mig+A100-80GB")
    mig, shared = cards
    mixed = (
        ContainerDevice(
            uuid=mig.id,
            usedmem=80640,
            usedcores=100,
            mig=MigSlice(profile="7g.79gb", placement=MigPlacement(start=0, size=8)),
        ),
        ContainerDevice(uuid=shared.id, usedmem=40960, usedcores=30),
    )
    table = {c.id: c for c in cards}
    assert container_problem("main", mixed, table) == f"container main: {MIXED_KINDS}"
    pod = make_pod([DOC], {})
    assert decision_problem(decision(pod, (mixed,)), table) == f"container c0: {MIXED_KINDS}"


def test_the_rule_refuses_what_a_card_cannot_be_given() -> None:
    mig, shared = advertised("A100-80GB:mig+A100-80GB")
    table = {mig.id: mig, shared.id: shared}

    def one(device: ContainerDevice) -> str | None:
        return container_problem("main", (device,), table)

    at = MigPlacement
    assert "shared slice of GPU" in (one(ContainerDevice(uuid=mig.id, usedmem=1000, usedcores=10)) or "")
    assert "not in mig mode" in (
        one(
            ContainerDevice(
                uuid=shared.id,
                usedmem=9728,
                usedcores=15,
                mig=MigSlice(profile="1g.10gb", placement=at(start=6, size=1)),
            )
        )
        or ""
    )
    assert "offers no MIG profile '4g.40gb'" in (
        one(
            ContainerDevice(
                uuid=mig.id,
                usedmem=40192,
                usedcores=57,
                mig=MigSlice(profile="4g.40gb", placement=at(start=0, size=4)),
            )
        )
        or ""
    )
    assert "cannot be placed at slice 1" in (
        one(
            ContainerDevice(
                uuid=mig.id,
                usedmem=19968,
                usedcores=29,
                mig=MigSlice(profile="2g.20gb", placement=at(start=1, size=2)),
            )
        )
        or ""
    )
    overlapping = (
        ContainerDevice(
            uuid=mig.id,
            usedmem=40192,
            usedcores=43,
            mig=MigSlice(profile="3g.40gb", placement=at(start=4, size=4)),
        ),
        ContainerDevice(
            uuid=mig.id,
            usedmem=9728,
            usedcores=15,
            mig=MigSlice(profile="1g.10gb", placement=at(start=6, size=1)),
        ),
    )
    assert "overlapping MIG instances" in (container_problem("main", overlapping, table) or "")
    assert container_problem("main", overlapping[:1], table) is None
    assert one(ContainerDevice(uuid=DeviceUUID("GPU-elsewhere"), usedmem=1, usedcores=0)) == (
        "GPU 'GPU-elsewhere' is not advertised by this node"
    )
