"""The dashboard's pure core: the fold of events into a cluster view, the pages built from it, the feed.

Cases: inventory makes nodes and cards (a heartbeat only refreshes them); a pod goes Pending
(with per-node reasons) -> Starting -> Running -> gone, its slice on its card's bar with memory
used from usage samples; health transitions override the inventory's flag until the next
inventory; a replayed older admission or verdict never undoes a placement; a new pod of the same
name replaces the old; seeding from the buckets then folding gives what folding alone gives;
checkpoints are unchanged by later folds; undecodable messages are counted and shown in the feed;
overview counts, busiest and most fragmented cards; unknown node/card/pod/page is NotFound, a bad
page number BadQuery; a silent Pending pod is hidden after pending_forget_s; feed filters.
"""

from __future__ import annotations

import msgpack
import pytest
from dashboard_builders import (
    MIB,
    admitted,
    allocation,
    applied,
    card_id,
    decided,
    inventory,
    released,
    unschedulable,
    usage,
)

from services.dashboard.errors import BadQuery, NotFound
from services.dashboard.feed import Feed, FeedFilter
from services.dashboard.pages import PageOptions, known, page, status
from services.dashboard.timeline import Raw, Timeline, absorb
from services.dashboard.view import ClusterView, Phase, fold, used_bytes_on
from shared.codec import encode
from shared.events import DeviceHealth, Event, subject_for
from shared.model import AllocationState


def folded(*events: Event) -> ClusterView:
    return fold((i + 1, e.ts, e) for i, e in enumerate(events))


def raw(event: Event, seq: int) -> Raw:
    return Raw(seq=seq, at=event.ts, subject=subject_for(event), data=encode(event))


def test_inventory_makes_nodes_and_cards_and_a_heartbeat_only_refreshes() -> None:
    view = folded(inventory("n1", 2), inventory("n1", 2, ts=1030.0))
    assert list(view.nodes) == ["n1"]
    assert [d.id for d in view.nodes["n1"].devices] == [card_id("n1", 0), card_id("n1", 1)]
    assert view.nodes["n1"].seen_at == 1030.0
    assert len(view.history[card_id("n1", 0)]) == 1  # the heartbeat is not history


def test_a_pod_goes_pending_then_starting_then_running_then_away() -> None:
    view = folded(inventory("n1"), admitted("p"), unschedulable("p", {"n1": "1/2 CardInsufficientMemory"}))
    pod = view.pods[("default", "p")]
    assert pod.phase is Phase.PENDING and pod.reasons == {"n1": "1/2 CardInsufficientMemory"}
    view.apply(decided("p", "n1", ts=1010.0))
    assert view.pods[("default", "p")].phase is Phase.STARTING
    assert view.pods[("default", "p")].reasons == {}
    view.apply(applied("p", "n1", ts=1011.0))
    assert view.pods[("default", "p")].phase is Phase.RUNNING
    view.apply(usage("n1", "p", 1500, ts=1012.0))
    assert used_bytes_on(view, card_id("n1", 0)) == 1500 * MIB
    assert view.series[card_id("n1", 0)][-1].used_mib == 1500
    view.apply(released("p", "n1", ts=1013.0))
    assert view.pods == {} and view.by_uid == {} and view.usage == {} and view.on_card == {}
    kinds = [e.kind for e in view.history[card_id("n1", 0)]]
    assert kinds == ["inventory.snapshot", "allocation.decided", "allocation.released"]


def test_health_transition_overrides_the_inventory_until_the_next_one() -> None:
    uuid = card_id("n1", 1)
    sick = DeviceHealth(node="n1", uuid=uuid, healthy=False, reason="Xid 79", ts=1001.0)
    view = folded(inventory("n1"), sick)
    body = page(view, None, f"/cards/{uuid}", {}, now=1002.0)
    assert body["card"]["healthy"] is False and body["card"]["health_reason"] == "Xid 79"
    view.apply(inventory("n1", ts=1005.0, generation=2))
    assert page(view, None, f"/cards/{uuid}", {}, now=1006.0)["card"]["healthy"] is True


def test_a_replayed_older_admission_or_verdict_never_undoes_a_placement() -> None:
    view = folded(inventory("n1"), decided("p", "n1"), applied("p", "n1"))
    view.apply(admitted("p", ts=900.0))
    view.apply(unschedulable("p", {"n1": "old"}, ts=900.0))
    pod = view.pods[("default", "p")]
    assert pod.phase is Phase.RUNNING and pod.allocation is not None and pod.reasons == {}


def test_a_new_pod_of_the_same_name_replaces_the_old_one() -> None:
    view = folded(inventory("n1", 2), decided("p", "n1", 0, uid="old"), decided("p", "n1", 1, uid="new"))
    assert view.pods[("default", "p")].uid == "new"
    assert "old" not in view.by_uid and view.on_card == {card_id("n1", 1): frozenset({"new"})}
    view.apply(released("p", "n1", uid="old"))  # the old pod's release leaves the new one alone
    assert view.pods[("default", "p")].uid == "new"


def test_seeding_from_the_buckets_then_folding_matches_folding_alone() -> None:
    events = [inventory("n1"), decided("a", "n1"), applied("a", "n1"), decided("b", "n1", mem=3000)]
    alone = folded(*events)
    seeded = ClusterView()
    seeded.seed([inventory("n1")], [allocation("a", "n1", state=AllocationState.APPLIED),
                                   allocation("b", "n1", mem=3000)], at=1005.0)
    fold(((i + 1, e.ts, e) for i, e in enumerate(events)), seeded)  # the history window replayed on top
    for view in (alone, seeded):
        assert {k: p.phase for k, p in view.pods.items()} == {("default", "a"): Phase.RUNNING,
                                                               ("default", "b"): Phase.STARTING}
    memory = [page(v, None, "/", {}, now=1006.0)["memory"] for v in (alone, seeded)]
    assert memory[0] == memory[1]


def test_a_checkpoint_is_unchanged_by_later_folds() -> None:
    view = folded(inventory("n1"), decided("a", "n1"))
    checkpoint = view.copy()
    view.apply(released("a", "n1"))
    view.apply(decided("b", "n1"))
    assert set(checkpoint.pods) == {("default", "a")} and set(view.pods) == {("default", "b")}
    assert checkpoint.on_card == {card_id("n1", 0): frozenset({"uid-a"})}


def test_undecodable_messages_are_counted_and_shown_never_raised() -> None:
    view, feed = ClusterView(), Feed(10)
    assert absorb(view, raw(inventory("n1"), 1), feed)
    junk = Raw(seq=2, at=5.0, subject="gpubus.inventory.snapshot.n1", data=b"\xc1junk")
    assert not absorb(view, junk, feed)
    body = msgpack.packb({"kind": "allocation.decided", "v": 99})
    assert not absorb(view, Raw(seq=3, at=6.0, subject="gpubus.allocation.decided.n1", data=body), feed)
    assert view.undecodable == 2 and view.seq == 3 and view.applied == 1
    entries = feed.newest(FeedFilter(heartbeats=True), 10)
    assert [e.undecodable for e in entries] == [True, True, False]
    assert entries[0].node == "n1" and "UNDECODABLE gpubus.allocation.decided.n1" in entries[0].line
    assert status(view)["undecodable"] == 2 and status(view)["seq"] == 3


def test_overview_counts_and_the_busiest_and_most_fragmented_cards() -> None:
    view = folded(inventory("n1", 3, devmem=10000), admitted("w"), unschedulable("w", {"n1": "full"}),
                  admitted("shared-memory-"), decided("a", "n1", 0, mem=9000, cores=50), applied("a", "n1"),
                  decided("b", "n1", 1, mem=2000, cores=100))
    body = page(view, None, "/", {}, now=1010.0)
    assert body["nodes"] == 1 and body["cards"] == 3
    assert body["memory"] == {"total": 30000, "allocated": 11000, "used": 0}
    assert body["cores"] == {"total": 300, "allocated": 150, "used": 0.0}
    assert body["slices"] == {"total": 30, "allocated": 2}
    assert body["pods"]["Running"] == 1 and body["pods"]["Starting"] == 1 and body["pods"]["Pending"] == 1
    assert [r["uuid"] for r in body["busiest"]] == [card_id("n1", 1), card_id("n1", 0)]
    # card 1: all cores given, 8000 MiB left that no pod can use
    assert [(r["uuid"], r["stranded"]) for r in body["fragmented"]] == [(card_id("n1", 1), 0.8)]


@pytest.mark.parametrize("path", ["/nodes/nope", "/cards/GPU-nope", "/pods/default/nope", "/nowhere",
                                  "/nodes/a/b"])
def test_unknown_node_card_pod_or_page_is_not_found(path: str) -> None:
    view = folded(inventory("n1"), decided("p", "n1"))
    assert not known(view, path)
    with pytest.raises(NotFound):
        page(view, None, path, {}, now=1010.0)


def test_known_paths_build() -> None:
    view = folded(inventory("n1"), decided("p", "n1"))
    paths = ("/", "/nodes", "/nodes/n1", f"/cards/{card_id('n1', 0)}", "/pods", "/pods/default/p", "/events")
    for path in paths:
        assert known(view, path)
        assert page(view, Feed(5), path, {}, now=1010.0)["path"] == path


def test_a_bad_page_number_or_phase_is_a_bad_query() -> None:
    view = folded(inventory("n1"))
    with pytest.raises(BadQuery):
        page(view, None, "/nodes", {"page": "-1"}, now=1.0)
    with pytest.raises(BadQuery):
        page(view, None, "/pods", {"phase": "Sleeping"}, now=1.0)


def test_nodes_are_paged_and_filtered() -> None:
    view = folded(*(inventory(f"n{i:03}", 1) for i in range(120)))
    first = page(view, None, "/nodes", {}, now=1001.0)
    assert first["total"] == 120 and len(first["nodes"]) == 50 and first["nodes"][0]["name"] == "n000"
    third = page(view, None, "/nodes", {"page": "2"}, now=1001.0)
    assert [n["name"] for n in third["nodes"]][:2] == ["n100", "n101"] and len(third["nodes"]) == 20
    assert page(view, None, "/nodes", {"q": "n11"}, now=1001.0)["total"] == 10


def test_a_pending_pod_shows_its_reasons_and_is_hidden_once_silent_too_long() -> None:
    view = folded(inventory("n1"), admitted("w"), unschedulable("w", {"n1": "1/2 CardInsufficientMemory",
                                                                      "n2": "0/8 CardUuidMismatch"}))
    body = page(view, None, "/pods/default/w", {}, now=1100.0)
    assert body["pod"]["phase"] == "Pending"
    assert body["pod"]["reasons"] == [{"node": "n1", "reason": "1/2 CardInsufficientMemory"},
                                      {"node": "n2", "reason": "0/8 CardUuidMismatch"}]
    assert body["pod"]["limits"] == [{"gpus": 1, "mem": 2000, "mem_percent": 101, "cores": 10}]
    options = PageOptions(pending_forget_s=60.0)
    assert page(view, None, "/pods", {}, now=1030.0, options=options)["total"] == 1
    assert page(view, None, "/pods", {}, now=1200.0, options=options)["total"] == 0


def test_slices_carry_pod_memory_cores_and_use() -> None:
    view = folded(inventory("n1"), decided("a", "n1", mem=4000, cores=30), usage("n1", "a", 1234))
    card = page(view, None, "/nodes/n1", {}, now=1005.0)["node"]["cards"][0]
    assert card["slices"] == [{"pod": "default/a", "container": "main", "mem": 4000, "cores": 30,
                               "used": 1234, "phase": "Starting"}]
    assert (card["mem_alloc"], card["cores_alloc"], card["used"], card["numa"]) == (4000, 30, 1234, 0)


def test_feed_filters_by_node_pod_card_subject_and_kind_and_hides_heartbeats() -> None:
    feed, view = Feed(100), ClusterView()
    for seq, event in enumerate([inventory("n1"), inventory("n2"), decided("a", "n1"), decided("b", "n2", 1),
                                 released("a", "n1"), usage("n2", "b", 100, card=1)], start=1):
        absorb(view, raw(event, seq), feed)
    assert [e.seq for e in feed.newest(FeedFilter(node="n1"), 10)] == [5, 3]
    assert [e.seq for e in feed.newest(FeedFilter(node="n1", heartbeats=True), 10)] == [5, 3, 1]
    assert [e.seq for e in feed.newest(FeedFilter(pod="default/a"), 10)] == [5, 3]
    assert [e.seq for e in feed.newest(FeedFilter(kind="allocation.decided"), 10)] == [4, 3]
    assert [e.seq for e in feed.newest(FeedFilter(card=card_id("n2", 1)), 10)] == [4]
    assert [e.seq for e in feed.newest(FeedFilter(card=card_id("n2", 1), heartbeats=True), 10)] == [6, 4, 2]
    assert [e.seq for e in feed.newest(FeedFilter(subject="allocation.released"), 10)] == [5]
    assert [e.seq for e in feed.newest(FeedFilter(heartbeats=True), 10)] == [6, 5, 4, 3, 2, 1]
    assert len(feed.newest(FeedFilter(), 2)) == 2


def test_timeline_checkpoints_after_catching_up_and_finds_the_one_before() -> None:
    timeline = Timeline(feed_size=10, checkpoint_interval_s=10.0, checkpoints=5)
    timeline.on_message(raw(inventory("n1", ts=100.0), 1), pending=1)
    assert not timeline.caught_up and timeline.checkpoint_times == []
    timeline.on_message(raw(decided("a", "n1", ts=101.0), 2), pending=0)
    assert timeline.caught_up and timeline.checkpoint_times == [101.0]
    timeline.on_message(raw(released("a", "n1", ts=105.0), 3))
    timeline.on_message(raw(decided("b", "n1", ts=115.0), 4))
    assert timeline.checkpoint_times == [101.0, 115.0]
    before = timeline.checkpoint_before(110.0)
    assert before is not None and set(before.pods) == {("default", "a")} and before.seq == 2
    assert timeline.checkpoint_before(50.0) is None
    timeline.on_message(raw(decided("c", "n1", ts=116.0), 3))  # an older sequence: already folded
    assert ("default", "c") not in timeline.view.pods
