"""Property tests of the Fit engine over small random nodes.

Properties: a placement never exceeds any device's memory, cores or slots; an exclusive request never
shares a card; for single-GPU-container pods Fit finds a placement whenever a brute-force search over
the devices finds one (HAMi's greedy scan is exact there; with several containers it is not, by design);
filter_nodes' shortcut agrees with the full chain on fit and reason string.
"""

from __future__ import annotations

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler.fit import NodeState, filter_nodes, fit_pod
from shared.model import (
    PERCENT_UNSET,
    ContainerRequest,
    ContainerSpec,
    DeviceInfo,
    DeviceUsage,
    DeviceUUID,
    NodeName,
    PodRequest,
    PodUID,
)


@st.composite
def nodes(draw: st.DrawFn) -> NodeState:
    n = draw(st.integers(1, 5))
    devices, usage = [], []
    for i in range(n):
        mem = draw(st.sampled_from([1000, 4000, 16000]))
        count = draw(st.integers(1, 4))
        core = draw(st.sampled_from([100, 100, 200, 0]))
        devices.append(
            DeviceInfo(
                id=DeviceUUID(f"GPU-{i}"),
                index=i,
                type="NVIDIA-X",
                devmem=mem,
                count=count,
                devcore=core,
                numa=draw(st.integers(0, 1)),
                health=draw(st.booleans() | st.just(True)),
            )
        )
        used = draw(st.integers(0, count))
        usage.append(
            DeviceUsage(
                used=used,
                usedmem=draw(st.integers(0, mem)) if used else 0,
                usedcores=draw(st.integers(0, core)) if used else 0,
            )
        )
    cordon = draw(st.sampled_from(["", "GPU-0"]))
    return NodeState(
        name=NodeName("n"),
        devices=tuple(devices),
        usage=tuple(usage),
        annotations={"hami.io/device-cordon": cordon},
    )


requests = st.builds(
    ContainerRequest,
    nums=st.integers(1, 3),
    memreq=st.sampled_from([0, 500, 2000, 8000]),
    mempercentagereq=st.sampled_from([PERCENT_UNSET, 30, 100]),
    coresreq=st.sampled_from([0, 20, 50, 100, 120]),
)
policies = st.sampled_from(["spread", "binpack", "mutex", "numa", "binpack,numa", "topology-aware"])


def make_pod(reqs: list[ContainerRequest], policy: str = "spread") -> PodRequest:
    return PodRequest(
        namespace="ns",
        name="p",
        uid=PodUID("u"),
        containers=tuple(ContainerSpec(name=f"c{i}", request=r) for i, r in enumerate(reqs)),
        annotations={"hami.io/gpu-scheduler-policy": policy},
    )


@settings(max_examples=300, deadline=None)
@given(nodes(), st.lists(requests, min_size=1, max_size=3), policies)
def test_placement_never_exceeds_memory_cores_or_slots(
    node: NodeState, reqs: list[ContainerRequest], policy: str
) -> None:
    fit = fit_pod(node, make_pod(reqs, policy))
    if not fit.fit:
        return
    after = node.with_pod(fit.devices)
    for d, u in zip(after.devices, after.usage, strict=True):
        before = node.usage[after.devices.index(d)]
        if u == before:
            continue
        assert u.used <= d.count and u.usedmem <= d.devmem and u.usedcores <= max(d.devcore, 100)
        assert u.usedcores <= d.devcore or (d.devcore == 0 and u.usedcores == before.usedcores)
        assert d.health and d.id != node.annotations["hami.io/device-cordon"]
    for slot in fit.devices:
        assert len({c.uuid for c in slot}) == len(slot)
    for r, slot in zip(reqs, fit.devices, strict=True):
        assert len(slot) == r.nums


@settings(max_examples=300, deadline=None)
@given(nodes(), st.integers(1, 3), policies)
def test_exclusive_request_never_shares_a_card(node: NodeState, nums: int, policy: str) -> None:
    fit = fit_pod(node, make_pod([ContainerRequest(nums=nums, memreq=1, coresreq=100)], policy))
    if not fit.fit:
        return
    for c in fit.devices[0]:
        i = next(k for k, d in enumerate(node.devices) if d.id == c.uuid)
        if node.devices[i].devcore == 100:
            assert node.usage[i].used == 0


def brute_force_fits(node: NodeState, r: ContainerRequest) -> bool:
    """Any set of r.nums distinct devices that each pass every per-device check on their own."""

    def ok(i: int) -> bool:
        d, u = node.devices[i], node.usage[i]
        cores = min(r.coresreq, 100)
        mem = r.memreq or (d.devmem * r.mempercentagereq // 100 if r.mempercentagereq != PERCENT_UNSET else 0)
        return (
            d.health
            and d.id != node.annotations["hami.io/device-cordon"]
            and u.used < d.count
            and d.devmem - u.usedmem >= mem
            and d.devcore - u.usedcores >= cores
            and not (d.devcore == 100 and cores == 100 and u.used > 0)
            and not (d.devcore != 0 and u.usedcores == d.devcore and cores == 0)
        )

    return any(all(ok(i) for i in combo) for combo in combinations(range(len(node.devices)), r.nums))


@settings(max_examples=400, deadline=None)
@given(nodes(), requests, st.sampled_from(["spread", "binpack", "numa", "binpack,numa"]))
def test_fit_agrees_with_brute_force_for_one_container(
    node: NodeState, r: ContainerRequest, policy: str
) -> None:
    assert fit_pod(node, make_pod([r], policy)).fit is brute_force_fits(node, r)


@settings(max_examples=400, deadline=None)
@given(st.lists(nodes(), min_size=1, max_size=3), requests)
def test_filter_shortcut_agrees_with_full_chain(states: list[NodeState], r: ContainerRequest) -> None:
    states = [
        NodeState(name=NodeName(f"n{i}"), devices=s.devices, usage=s.usage, annotations=s.annotations)
        for i, s in enumerate(states)
    ]
    pod = make_pod([r])
    result = filter_nodes(states, pod)
    fits = dict(result.fits)
    for s in states:
        full = fit_pod(s, pod)
        assert (s.name in fits) is full.fit
        if full.fit:
            assert fits[s.name] == full.score
        else:
            assert result.failed[s.name] == full.reason
