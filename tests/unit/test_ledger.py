"""The allocation ledger: usage derived incrementally from entries, reservations, revisions, staleness.

Case matrix: apply/delete of single- and multi-container entries (init collapse included);
replays (same or older revision, tombstones older than the entry); reservations replaced by their
written entry and lapsing at their expiry; FAILED entries holding nothing; inventory heartbeats
that do or do not change the node version; stale detection; and a property test that any
sequence of operations leaves the usage equal to a from-scratch rebuild.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler.ledger import Ledger, NodeInventory
from shared.annotations import collapse_usage
from shared.model import (
    Allocation,
    AllocationState,
    ContainerDevice,
    DeviceInfo,
    DeviceUsage,
    DeviceUUID,
    NodeName,
    PodUID,
)

N1 = NodeName("node-1")
G0, G1 = DeviceUUID("GPU-0"), DeviceUUID("GPU-1")


def inventory(*uuids: DeviceUUID, seen_at: float = 100.0, heartbeat_s: float = 10.0) -> NodeInventory:
    devices = tuple(DeviceInfo(id=u, index=i, type="NVIDIA-A100", devmem=80_000) for i, u in enumerate(uuids))
    return NodeInventory(devices=devices, seen_at=seen_at, heartbeat_s=heartbeat_s)


def alloc(
    uid: str,
    *slots: tuple[tuple[DeviceUUID, int, int], ...],
    node: NodeName = N1,
    init_count: int = 0,
    state: AllocationState = AllocationState.DECIDED,
) -> Allocation:
    devices = tuple(
        tuple(ContainerDevice(uuid=u, usedmem=m, usedcores=c) for u, m, c in slot) for slot in slots
    )
    return Allocation(
        pod_uid=PodUID(uid),
        namespace="ns",
        name=uid,
        node=node,
        devices=devices,
        containers=tuple(f"c{i}" for i in range(len(slots))),
        init_count=init_count,
        state=state,
    )


def test_applied_entry_adds_its_slices_to_each_device() -> None:
    ledger = Ledger()
    ledger.set_inventory(N1, inventory(G0, G1))
    ledger.apply(alloc("p1", ((G0, 3000, 30),), ((G0, 2000, 10), (G1, 1000, 0))), revision=1)
    assert ledger.usage(N1, G0) == DeviceUsage(used=2, usedmem=5000, usedcores=40)
    assert ledger.usage(N1, G1) == DeviceUsage(used=1, usedmem=1000, usedcores=0)


def test_init_containers_count_as_the_per_device_max_not_the_sum() -> None:
    ledger = Ledger()
    ledger.apply(alloc("p1", ((G0, 4000, 50),), ((G0, 1000, 10),), init_count=1), revision=1)
    assert ledger.usage(N1, G0) == DeviceUsage(used=1, usedmem=4000, usedcores=50)


def test_delete_returns_the_node_to_zero_usage() -> None:
    ledger = Ledger()
    ledger.apply(alloc("p1", ((G0, 3000, 30),)), revision=1)
    removed = ledger.delete(PodUID("p1"))
    assert removed is not None and removed.pod_uid == "p1"
    assert ledger.usage(N1, G0) == DeviceUsage()
    assert ledger.entries_on(N1) == []


def test_replaying_an_older_revision_is_ignored() -> None:
    ledger = Ledger()
    new = alloc("p1", ((G0, 3000, 30),), state=AllocationState.APPLIED)
    ledger.apply(new, revision=5)
    assert not ledger.apply(alloc("p1", ((G0, 9000, 90),)), revision=4)
    assert ledger.entry(PodUID("p1")) == new
    assert ledger.usage(N1, G0).usedmem == 3000


def test_replaying_the_same_revision_changes_nothing() -> None:
    ledger = Ledger()
    entry = alloc("p1", ((G0, 3000, 30),))
    ledger.apply(entry, revision=5)
    ledger.apply(entry, revision=5)
    assert ledger.usage(N1, G0) == DeviceUsage(used=1, usedmem=3000, usedcores=30)


def test_a_tombstone_older_than_the_entry_does_not_remove_it() -> None:
    ledger = Ledger()
    ledger.apply(alloc("p1", ((G0, 3000, 30),)), revision=7)
    assert ledger.delete(PodUID("p1"), revision=6) is None
    assert ledger.usage(N1, G0).used == 1
    assert ledger.delete(PodUID("p1"), revision=8) is not None


def test_failed_entry_holds_no_usage() -> None:
    ledger = Ledger()
    ledger.apply(alloc("p1", ((G0, 3000, 30),)), revision=1)
    ledger.apply(alloc("p1", ((G0, 3000, 30),), state=AllocationState.FAILED), revision=2)
    assert ledger.usage(N1, G0) == DeviceUsage()
    assert ledger.entry(PodUID("p1")) is not None


def test_reservation_counts_until_its_entry_replaces_it() -> None:
    ledger = Ledger()
    decision = alloc("p1", ((G0, 3000, 30),))
    ledger.reserve(decision, expires_at=200.0)
    assert ledger.usage(N1, G0).usedmem == 3000
    reserved = ledger.entry(PodUID("p1"))
    assert reserved is not None and reserved.state is AllocationState.RESERVED
    ledger.apply(decision, revision=3)
    assert ledger.usage(N1, G0).usedmem == 3000
    assert ledger.expire(now=1000.0) == []


def test_reservation_lapses_at_its_expiry() -> None:
    ledger = Ledger()
    ledger.reserve(alloc("p1", ((G0, 3000, 30),)), expires_at=200.0)
    assert ledger.expire(now=199.0) == []
    lapsed = ledger.expire(now=200.0)
    assert [a.pod_uid for a in lapsed] == ["p1"]
    assert ledger.usage(N1, G0) == DeviceUsage()


def test_heartbeat_with_same_devices_keeps_the_node_version() -> None:
    ledger = Ledger()
    ledger.set_inventory(N1, inventory(G0))
    v = ledger.version(N1)
    ledger.set_inventory(N1, inventory(G0, seen_at=200.0))
    assert ledger.version(N1) == v
    inv = ledger.inventory(N1)
    assert inv is not None and inv.seen_at == 200.0
    ledger.set_inventory(N1, inventory(G0, G1, seen_at=300.0))
    assert ledger.version(N1) == v + 1


def test_usage_changes_bump_the_node_version_and_refresh_the_snapshot() -> None:
    ledger = Ledger()
    ledger.set_inventory(N1, inventory(G0, G1))
    before = ledger.snapshot(N1)
    assert before is not None and before.usage == (DeviceUsage(), DeviceUsage())
    assert ledger.snapshot(N1) == before
    ledger.apply(alloc("p1", ((G1, 100, 5),)), revision=1)
    after = ledger.snapshot(N1)
    assert after is not None and after.version > before.version
    assert after.usage == (DeviceUsage(), DeviceUsage(used=1, usedmem=100, usedcores=5))


def test_a_state_change_that_keeps_the_devices_keeps_the_node_version() -> None:
    ledger = Ledger()
    ledger.set_inventory(N1, inventory(G0))
    feed = ledger.change_feed()
    ledger.reserve(replace(alloc("p1", ((G0, 100, 5),)), state=AllocationState.RESERVED), expires_at=9.0)
    v = ledger.version(N1)
    feed.clear()
    for revision, state in enumerate((AllocationState.DECIDED, AllocationState.APPLIED), start=1):
        ledger.apply(alloc("p1", ((G0, 100, 5),), state=state), revision=revision)
        assert ledger.version(N1) == v and not feed
    entry = ledger.entry(PodUID("p1"))
    assert entry is not None and entry.state is AllocationState.APPLIED and ledger.revision(PodUID("p1")) == 2
    assert ledger.expire(now=100.0) == []  # no longer a reservation
    ledger.apply(alloc("p1", ((G0, 100, 5),), state=AllocationState.FAILED), revision=3)
    assert ledger.version(N1) > v and feed == {N1}
    assert ledger.usage(N1, G0) == DeviceUsage()


def test_node_without_inventory_has_no_snapshot_but_keeps_its_usage() -> None:
    ledger = Ledger()
    ledger.apply(alloc("p1", ((G0, 100, 5),)), revision=1)
    assert ledger.snapshot(N1) is None
    ledger.set_inventory(N1, inventory(G0))
    snap = ledger.snapshot(N1)
    assert snap is not None and snap.usage[0].usedmem == 100
    assert ledger.remove_node(N1)
    assert ledger.snapshot(N1) is None


def test_changed_node_annotations_bump_the_version() -> None:
    ledger = Ledger()
    ledger.set_inventory(N1, inventory(G0))
    v = ledger.version(N1)
    ledger.set_annotations(N1, {})
    assert ledger.version(N1) == v
    ledger.set_annotations(N1, {"hami.io/device-cordon": "GPU-0"})
    snap = ledger.snapshot(N1)
    assert snap is not None and snap.version == v + 1
    assert snap.annotations == {"hami.io/device-cordon": "GPU-0"}


def test_inventory_is_stale_after_three_missed_heartbeats() -> None:
    inv = inventory(G0, seen_at=100.0, heartbeat_s=10.0)
    assert not inv.stale(now=130.0)
    assert inv.stale(now=130.1)


_UIDS = st.sampled_from([f"p{i}" for i in range(6)])
_SLOT = st.lists(
    st.tuples(st.sampled_from([G0, G1]), st.integers(0, 5000), st.integers(0, 100)), min_size=0, max_size=2
).map(tuple)
_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("apply"),
            _UIDS,
            st.lists(_SLOT, min_size=1, max_size=3),
            st.integers(0, 2),
            st.sampled_from(list(AllocationState)),
        ),
        st.tuples(st.just("delete"), _UIDS),
        st.tuples(st.just("reserve"), _UIDS, st.lists(_SLOT, min_size=1, max_size=3)),
        st.tuples(st.just("expire"), st.integers(0, 3)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(_OPS)
def test_usage_always_equals_a_rebuild_from_the_held_entries(ops: list[tuple[object, ...]]) -> None:
    ledger = Ledger()
    for revision, op in enumerate(ops, start=1):
        if op[0] == "apply":
            _, uid, slots, init, state = op
            assert isinstance(slots, list) and isinstance(init, int)
            a = alloc(str(uid), *slots, init_count=min(init, len(slots)))
            ledger.apply(replace(a, state=state), revision)  # type: ignore[arg-type]
        elif op[0] == "delete":
            ledger.delete(PodUID(str(op[1])), revision)
        elif op[0] == "reserve":
            ledger.reserve(alloc(str(op[1]), *op[2]), expires_at=float(revision % 4))  # type: ignore[misc]
        else:
            ledger.expire(now=float(op[1]))  # type: ignore[arg-type]
    expected: dict[DeviceUUID, list[int]] = {}
    for entry in ledger.entries():
        if entry.state is AllocationState.FAILED:
            continue
        for uuid, u in collapse_usage(entry.devices, entry.init_count).items():
            cur = expected.setdefault(uuid, [0, 0, 0])
            cur[0], cur[1], cur[2] = cur[0] + u.used, cur[1] + u.usedmem, cur[2] + u.usedcores
    for uuid in (G0, G1):
        used, mem, cores = expected.get(uuid, [0, 0, 0])
        assert ledger.usage(N1, uuid) == DeviceUsage(used=used, usedmem=mem, usedcores=cores)
