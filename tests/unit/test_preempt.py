"""Who would have to go for a pending pod to fit: the pure preemption core, as tables.

Matrix: the fewest victims on one card (memory, cores, slots, exclusive cards, MIG placements);
ties by the lowest highest priority, then the priority sum; never a pod of equal or higher
priority; ``preemptionPolicy: Never``; a pod that fits already; one card before one node (a pod
of two cards); a victim's slices on other cards freed too; the best node across nodes; nothing
enough; the greedy fallback past the search budget still minimal. Property: over random nodes
and residents, every plan's victims are of lower priority, the pod fits once they are gone, and
no victim could be spared.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler import preempt
from services.scheduler.fit import NodeState, fit_pod
from services.scheduler.preempt import (
    FITS_ALREADY,
    NEVER,
    NO_CANDIDATES,
    NOT_ENOUGH,
    Preemption,
    Resident,
    on_node,
    plan,
)
from shared.model import (
    ContainerDevice,
    ContainerRequest,
    ContainerSpec,
    DeviceInfo,
    DeviceUUID,
    MigPlacement,
    MigProfile,
    MigSlice,
    NodeName,
    PodDevices,
    PodRequest,
    PodUID,
)

GIB = 1024


def card(i: int, mem: int = 80 * GIB, count: int = 10, **kw: object) -> DeviceInfo:
    return DeviceInfo(id=DeviceUUID(f"GPU-{i}"), index=i, type="NVIDIA-A100", devmem=mem, count=count, **kw)  # type: ignore[arg-type]


def slice_of(i: int, mem: int, cores: int = 0) -> ContainerDevice:
    return ContainerDevice(uuid=DeviceUUID(f"GPU-{i}"), usedmem=mem, usedcores=cores, idx=i)


def resident(name: str, priority: int, *devices: ContainerDevice) -> Resident:
    return Resident(
        uid=PodUID(f"uid-{name}"), namespace="ns", name=name, priority=priority, devices=(tuple(devices),)
    )


def node(cards: tuple[DeviceInfo, ...], residents: list[Resident], name: str = "n1") -> NodeState:
    state = NodeState(name=NodeName(name), devices=cards)
    for r in residents:
        state = state.with_pod(r.devices, r.init_count)
    return state


def pending(nums: int = 1, mem: int = 0, cores: int = 0) -> PodRequest:
    return PodRequest(
        namespace="ns",
        name="urgent",
        uid=PodUID("uid-urgent"),
        containers=(
            ContainerSpec(name="main", request=ContainerRequest(nums=nums, memreq=mem, coresreq=cores)),
        ),
    )


def names(p: Preemption | str) -> list[str]:
    assert isinstance(p, Preemption), p
    return [v.name for v in p.victims]


def best_on(
    cards: tuple[DeviceInfo, ...], residents: list[Resident], pod: PodRequest, priority: int = 1000
) -> Preemption | str:
    return on_node(node(cards, residents), residents, pod, priority)


# --- one card --------------------------------------------------------------------------------


def test_the_fewest_lower_priority_pods_on_one_card_and_of_equal_size_the_lowest_priorities() -> None:
    """80 GiB, 78 GiB held: 50 GiB needs two pods gone; {a, b} and {a, c} both do, c's priority is higher."""
    residents = [
        resident("a", 0, slice_of(0, 40 * GIB)),
        resident("b", 0, slice_of(0, 28 * GIB)),
        resident("c", 500, slice_of(0, 10 * GIB)),
    ]
    found = best_on((card(0),), residents, pending(mem=50 * GIB))
    assert names(found) == ["a", "b"]
    assert isinstance(found, Preemption) and found.card == "GPU-0"
    assert [d.uuid for d in found.fit.devices[0]] == ["GPU-0"]


def test_of_two_pairs_the_one_whose_highest_priority_is_lower_goes_even_with_a_higher_sum() -> None:
    """Kubernetes' order: the lowest highest victim priority first, the sum only breaks its ties."""
    residents = [
        resident("p1", 300, slice_of(0, 30 * GIB)),
        resident("p2", 300, slice_of(0, 30 * GIB)),
        resident("q1", 0, slice_of(1, 30 * GIB)),
        resident("q2", 500, slice_of(1, 30 * GIB)),
    ]
    found = best_on((card(0), card(1)), residents, pending(mem=70 * GIB))
    assert names(found) == ["p1", "p2"]


def test_one_pod_on_another_card_beats_three_on_the_first() -> None:
    residents = [
        resident("s1", 0, slice_of(0, 30 * GIB)),
        resident("s2", 0, slice_of(0, 30 * GIB)),
        resident("s3", 0, slice_of(0, 20 * GIB)),
        resident("big", 100, slice_of(1, 70 * GIB)),
    ]
    found = best_on((card(0), card(1)), residents, pending(mem=60 * GIB))
    assert names(found) == ["big"]
    assert isinstance(found, Preemption) and found.card == "GPU-1"


@pytest.mark.parametrize(
    ("why", "residents", "pod", "victims"),
    [
        (
            "cores: 30 % free, 60 % asked",
            [resident("a", 0, slice_of(0, GIB, 40)), resident("b", 1, slice_of(0, GIB, 30))],
            pending(mem=GIB, cores=60),
            ["a"],
        ),
        (
            "slots: the card's 2 slots are taken; the lowest priority goes",
            [resident("a", 5, slice_of(0, GIB)), resident("b", 3, slice_of(0, GIB))],
            pending(mem=GIB),
            ["b"],
        ),
        (
            "an exclusive request needs the card empty",
            [resident("a", 0, slice_of(0, GIB)), resident("b", 0, slice_of(0, GIB))],
            pending(mem=GIB, cores=100),
            ["a", "b"],
        ),
    ],
)
def test_what_a_card_lacks_decides_who_goes(
    why: str, residents: list[Resident], pod: PodRequest, victims: list[str]
) -> None:
    assert names(best_on((card(0, count=2),), residents, pod)) == victims, why


def test_a_mig_card_frees_the_instance_in_the_way_of_a_3g() -> None:
    """3g.40gb sits at slices 4-7 (preferred) or 0-3; 1g instances at 6 and 5 block the first, one at 0
    the second: evicting the pod at 0 is enough."""
    at = MigPlacement
    profiles = (
        MigProfile(
            name="1g.10gb",
            memory_mb=9728,
            core=15,
            slice_count=1,
            placements=tuple(at(start=s, size=1) for s in range(7)),
        ),
        MigProfile(
            name="3g.40gb",
            memory_mb=40192,
            core=43,
            slice_count=3,
            placements=(at(start=0, size=4), at(start=4, size=4)),
        ),
    )
    mig = card(0, count=7, mode="mig", mig_profiles=profiles)

    def instance(start: int) -> ContainerDevice:
        return ContainerDevice(
            uuid=mig.id,
            usedmem=9728,
            usedcores=15,
            mig=MigSlice(profile="1g.10gb", placement=at(start=start, size=1)),
        )

    residents = [resident("x", 0, instance(6)), resident("y", 0, instance(5)), resident("z", 1, instance(0))]
    found = best_on((mig,), residents, pending(mem=30000))
    assert names(found) == ["z"]
    assert isinstance(found, Preemption)
    (placed,) = found.fit.devices[0]
    assert placed.mig == MigSlice(profile="3g.40gb", placement=at(start=0, size=4))


# --- who is never a victim, and when nobody is -------------------------------------------------


def test_equal_or_higher_priority_is_never_a_victim() -> None:
    residents = [resident("peer", 1000, slice_of(0, 70 * GIB)), resident("boss", 2000, slice_of(1, 70 * GIB))]
    assert best_on((card(0), card(1)), residents, pending(mem=60 * GIB)) == NO_CANDIDATES


def test_the_pod_never_preempts_its_own_held_slice() -> None:
    """A slice the ledger holds for the pending pod itself is never one of its victims."""
    itself = Resident(
        uid=PodUID("uid-urgent"),
        namespace="ns",
        name="urgent",
        priority=0,
        devices=((slice_of(0, 70 * GIB),),),
    )
    assert best_on((card(0),), [itself], pending(mem=60 * GIB)) == NO_CANDIDATES


def test_lower_priority_pods_that_free_too_little_are_not_enough() -> None:
    residents = [resident("peer", 1000, slice_of(0, 60 * GIB)), resident("low", 0, slice_of(0, 10 * GIB))]
    assert best_on((card(0),), residents, pending(mem=40 * GIB)) == NOT_ENOUGH


def test_preemption_policy_never_preempts_no_one() -> None:
    residents = [resident("low", 0, slice_of(0, 70 * GIB))]
    state = node((card(0),), residents)
    found = plan([state], {state.name: residents}, pending(mem=60 * GIB), 1000, preemption_policy="Never")
    assert found.best is None and found.reason == NEVER and found.per_node == {"n1": NEVER}


def test_a_pod_that_fits_needs_no_victims() -> None:
    residents = [resident("low", 0, slice_of(0, 10 * GIB))]
    state = node((card(0),), residents)
    found = plan([state], {state.name: residents}, pending(mem=60 * GIB), 1000)
    assert found.best is None and found.reason == FITS_ALREADY


# --- one node, several nodes --------------------------------------------------------------------


def test_a_two_card_pod_takes_victims_across_the_node_only_when_no_one_card_is_enough() -> None:
    residents = [resident("a", 0, slice_of(0, 50 * GIB)), resident("b", 0, slice_of(1, 50 * GIB))]
    found = best_on((card(0), card(1)), residents, pending(nums=2, mem=40 * GIB))
    assert names(found) == ["a", "b"]
    assert isinstance(found, Preemption) and found.card is None


def test_a_victim_on_two_cards_frees_both() -> None:
    wide = resident("wide", 0, slice_of(0, 50 * GIB), slice_of(1, 50 * GIB))
    narrow = resident("narrow", 0, slice_of(1, 20 * GIB))
    found = best_on((card(0), card(1)), [wide, narrow], pending(nums=2, mem=40 * GIB))
    assert names(found) == ["wide"]
    assert isinstance(found, Preemption) and found.card in {"GPU-0", "GPU-1"}


def test_the_best_node_has_the_fewest_victims_then_the_lowest_priorities_then_the_name() -> None:
    def one(name: str, held: list[Resident]) -> NodeState:
        return node((card(0),), held, name)

    crowded = [resident("c1", 0, slice_of(0, 40 * GIB)), resident("c2", 0, slice_of(0, 38 * GIB))]
    senior = [resident("s", 900, slice_of(0, 78 * GIB))]
    junior = [resident("j", 10, slice_of(0, 78 * GIB))]
    twin = [resident("t", 10, slice_of(0, 78 * GIB))]
    nodes = [one("a-crowded", crowded), one("b-senior", senior), one("d-twin", twin), one("c-junior", junior)]
    residents = {
        NodeName("a-crowded"): crowded,
        NodeName("b-senior"): senior,
        NodeName("c-junior"): junior,
        NodeName("d-twin"): twin,
    }
    found = plan(nodes, residents, pending(mem=60 * GIB), 1000)
    assert found.best is not None and found.best.node == "c-junior" and names(found.best) == ["j"]
    assert names(found.per_node[NodeName("a-crowded")]) == ["c1", "c2"]


@pytest.mark.parametrize("budget", ["SEARCH_BUDGET", "PLAN_BUDGET"])
def test_past_the_search_budget_the_victims_are_still_minimal(
    monkeypatch: pytest.MonkeyPatch, budget: str
) -> None:
    """Greedy: lowest priority first until it fits (a, b, c), then spare whom it fits without (a)."""
    monkeypatch.setattr(preempt, budget, 0)
    residents = [
        resident("a", 0, slice_of(0, 5 * GIB)),
        resident("b", 1, slice_of(0, 30 * GIB)),
        resident("c", 2, slice_of(0, 30 * GIB)),
        resident("d", 3, slice_of(0, 10 * GIB)),
    ]
    assert names(best_on((card(0),), residents, pending(mem=60 * GIB))) == ["b", "c"]


# --- property --------------------------------------------------------------------------------


@st.composite
def crowded_nodes(draw: st.DrawFn) -> tuple[NodeState, list[Resident]]:
    cards = tuple(
        card(i, mem=16 * GIB, count=draw(st.integers(1, 4))) for i in range(draw(st.integers(1, 3)))
    )
    state = NodeState(name=NodeName("n1"), devices=cards)
    residents: list[Resident] = []
    for k in range(draw(st.integers(0, 6))):
        devices: PodDevices = (
            tuple(
                slice_of(
                    i, draw(st.sampled_from([GIB, 4 * GIB, 8 * GIB])), draw(st.sampled_from([0, 20, 50]))
                )
                for i in sorted(draw(st.sets(st.integers(0, len(cards) - 1), min_size=1, max_size=2)))
            ),
        )
        r = Resident(
            uid=PodUID(f"u{k}"),
            namespace="ns",
            name=f"r{k}",
            priority=draw(st.integers(0, 3)) * 500,
            devices=devices,
        )
        if fit_pod(
            state,
            PodRequest(
                namespace="ns",
                name="x",
                uid=PodUID("x"),
                containers=(
                    ContainerSpec(name="c", request=ContainerRequest(nums=len(devices[0]), memreq=1)),
                ),
            ),
        ).fit:
            state = state.with_pod(r.devices)
            residents.append(r)
    return state, residents


@settings(max_examples=200, deadline=None)
@given(
    crowded_nodes(),
    st.integers(1, 2),
    st.sampled_from([2 * GIB, 8 * GIB, 14 * GIB]),
    st.sampled_from([0, 50, 100]),
)
def test_every_plan_evicts_only_lower_priority_pods_it_needs_and_then_fits(
    crowded: tuple[NodeState, list[Resident]], nums: int, mem: int, cores: int
) -> None:
    state, residents = crowded
    pod = pending(nums=nums, mem=mem, cores=cores)
    if fit_pod(state, pod).fit:
        return
    found = on_node(state, residents, pod, 1000)
    if not isinstance(found, Preemption):
        return
    assert all(v.priority < 1000 for v in found.victims)

    def after(victims: list[Resident]) -> NodeState:
        out = state
        for v in victims:
            out = out.without_pod(v.devices)
        return out

    assert fit_pod(after(list(found.victims)), pod).fit
    for spared in found.victims:
        assert not fit_pod(after([v for v in found.victims if v is not spared]), pod).fit
    if found.card is not None:
        assert all(found.card in v.cards for v in found.victims)
