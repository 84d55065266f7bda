"""Dashboard v2's pure core: pods as the API server and ledger know them, finished pods' history,
pending diagnosis, held-but-idle slices, the type mix and the trends behind the charts.

Cases: an admission alone (a ``generateName`` prefix, a create the API server refused with 409)
is no pod and is never counted Pending, while the pod that later shows up with its UID carries
that admission's requests and time; a refused resubmission leaves the running pod as it was; a
released pod stays viewable (given, where, peak use, how long it ran, why) for its retention
and is listed under the Finished phase, then is forgotten; a pending pod's page gives its wait
and the releases since its verdict on the nodes that refused it; a pod under the SM threshold
for long enough is held but idle and one busy is not; the overview's type mix; trends sample
the state that held at each boundary, downsample to the ring's step, cut at any moment (time
travel) and refuse an unknown range; heartbeats never push placements out of the feed.
"""

from __future__ import annotations

import math

import pytest
from dashboard_builders import (
    admitted,
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
from services.dashboard.pages import PageOptions, known, page
from services.dashboard.timeline import Raw, Timeline, absorb
from services.dashboard.trends import Range, Scope, Trends
from services.dashboard.view import ClusterView, Phase, fold
from shared.codec import encode
from shared.events import Event, subject_for


def folded(*events: Event, retention: float = 86_400.0) -> ClusterView:
    return fold(((i + 1, e.ts, e) for i, e in enumerate(events)), ClusterView(finished_retention_s=retention))


def test_an_admission_alone_is_no_pod_and_never_pending() -> None:
    # a generateName pod is admitted under its prefix; "taken" was admitted and then refused (409)
    view = folded(inventory("n1"), admitted("shared-memory-"), admitted("taken"))
    assert view.pods == {}
    body = page(view, None, "/", {}, now=1001.0)
    assert body["pods"]["Pending"] == 0
    assert page(view, None, "/pods", {}, now=1001.0)["total"] == 0
    assert not known(view, "/pods/default/shared-memory-")
    with pytest.raises(NotFound):
        page(view, None, "/pods/default/shared-memory-", {}, now=1001.0)


def test_a_pod_exists_once_it_has_a_uid_and_carries_its_admission() -> None:
    view = folded(inventory("n1"), admitted("w", ts=990.0, mem=3000),
                  unschedulable("w", {"n1": "full"}, ts=1001.0))
    pod = view.pods[("default", "w")]
    assert pod.uid == "uid-w" and pod.phase is Phase.PENDING and pod.created_at == 990.0
    assert pod.requests[0] is not None and pod.requests[0].memreq == 3000
    assert page(view, None, "/", {}, now=1002.0)["pods"]["Pending"] == 1


def test_a_refused_resubmission_leaves_the_running_pod_as_it_was() -> None:
    view = folded(inventory("n1"), decided("p", "n1"), applied("p", "n1"), admitted("p", ts=1010.0))
    pod = view.pods[("default", "p")]
    assert pod.phase is Phase.RUNNING and pod.uid == "uid-p"
    body = page(view, None, "/", {}, now=1011.0)
    assert body["pods"]["Running"] == 1 and body["pods"]["Pending"] == 0


def test_a_finished_pod_stays_viewable_for_its_retention() -> None:
    view = folded(inventory("n1"), decided("done", "n1", mem=4000, cores=30, ts=1001.0),
                  applied("done", "n1"), usage("n1", "done", 1500, util=0.4, ts=1010.0),
                  usage("n1", "done", 700, util=0.1, ts=1020.0),
                  released("done", "n1", ts=1061.0, why="pod finished"), retention=100.0)
    assert ("default", "done") not in view.pods and known(view, "/pods/default/done")
    pod = page(view, None, "/pods/default/done", {}, now=1070.0)["pod"]
    assert pod["phase"] == "Finished" and pod["node"] == "n1" and pod["why"] == "pod finished"
    assert pod["ran_s"] == 60.0 and pod["ended_at"] == 1061.0
    assert pod["cards"] == [{"uuid": card_id("n1", 0), "container": "main", "mem": 4000, "cores": 30,
                             "used": 1500, "sm": 40.0}]
    listed = page(view, None, "/pods", {"phase": "Finished"}, now=1070.0)
    assert [p["name"] for p in listed["pods"]] == ["done"]
    assert page(view, None, "/", {}, now=1070.0)["finished"] == 1
    with pytest.raises(NotFound):  # past its retention at the moment looked at
        page(view, None, "/pods/default/done", {}, now=1200.0)
    view.apply(decided("other", "n1", ts=1300.0))
    view.apply(released("other", "n1", ts=1301.0))
    assert list(view.finished) == [("default", "other")]  # pruned as later releases arrive


def test_a_pending_pod_shows_its_wait_and_what_may_unblock_it() -> None:
    view = folded(inventory("n1"), inventory("n2"), decided("big", "n1", mem=70000, ts=1000.5),
                  admitted("w", ts=1000.0),
                  unschedulable("w", {"n1": "1/2 CardInsufficientMemory"}, ts=1001.0),
                  decided("x", "n2", ts=1001.5), released("x", "n2", ts=1002.0),
                  released("big", "n1", ts=1003.0))
    pod = page(view, None, "/pods/default/w", {}, now=1031.0)["pod"]
    assert pod["waiting"]["waited_s"] == 31.0 and pod["waiting"]["verdict_age_s"] == 30.0
    texts = [u["text"] for u in pod["waiting"]["unblocking"]]
    assert len(texts) == 1 and "default/big freed 70000 MiB on n1" in texts[0]  # n2 never refused it


def test_held_but_idle_slices_are_those_under_the_threshold_long_enough() -> None:
    view = folded(inventory("n1", 2), decided("lazy", "n1", 0, mem=6000), decided("busy", "n1", 1, mem=3000),
                  usage("n1", "lazy", 10, util=0.0, ts=1000.0),
                  usage("n1", "busy", 900, card=1, util=0.6, ts=1000.0),
                  usage("n1", "lazy", 10, util=0.01, ts=1700.0))
    options = PageOptions(idle_after_s=600.0)
    idle = page(view, None, "/", {}, now=1700.0, options=options)["idle"]
    assert idle["count"] == 1 and idle["mem"] == 6000
    assert idle["slices"][0]["pod"] == "default/lazy" and idle["slices"][0]["idle_s"] == 700
    assert page(view, None, "/", {}, now=1500.0, options=options)["idle"]["count"] == 0
    view.apply(usage("n1", "lazy", 10, util=0.5, ts=1710.0))
    assert page(view, None, "/", {}, now=1710.0, options=options)["idle"]["count"] == 0


def test_the_overview_gives_the_type_mix_and_top_nodes() -> None:
    view = folded(inventory("n1", 2), inventory("n2", 1), decided("a", "n2", mem=5000),
                  usage("n2", "a", 2048, util=0.5))
    body = page(view, None, "/", {}, now=1005.0)
    assert body["types"] == [{"type": "NVIDIA-A100-SXM4-80GB", "cards": 3, "mem_total": 3 * 81920,
                              "mem_alloc": 5000, "mem_used": 2048}]
    assert [n["name"] for n in body["top_nodes"]["allocated"]] == ["n2"]
    assert body["top_nodes"]["used"][0]["cores_used"] == 50.0
    assert body["cores"]["used"] == 50.0


def raw(event: Event, seq: int, at: float) -> Raw:
    return Raw(seq=seq, at=at, subject=subject_for(event), data=encode(event))


def test_trends_sample_the_state_that_held_at_each_boundary_and_cut_at_any_moment() -> None:
    timeline = Timeline(feed_size=10, checkpoint_interval_s=1000.0, checkpoints=2, trend_step_s=10.0)
    timeline.on_message(raw(inventory("n1", 1, ts=1000.0), 1, 1000.0))  # caught up: sampling starts
    timeline.on_message(raw(decided("a", "n1", mem=8000, cores=20, ts=1005.0), 2, 1005.0))
    timeline.on_message(raw(usage("n1", "a", 4096, util=0.25, ts=1031.0), 3, 1031.0))
    timeline.on_message(raw(released("a", "n1", ts=1045.0), 4, 1045.0))
    timeline.on_message(raw(inventory("n1", 1, ts=1075.0), 5, 1075.0))  # a heartbeat moves time on
    s = timeline.trends.series(Scope.CLUSTER, "cluster", Range.HOUR, until=1075.0)
    assert s.t == [1010.0, 1020.0, 1030.0, 1040.0, 1050.0, 1060.0]  # 1070's slot is written once it ends
    assert s.values["mem_alloc"] == [8000.0, 8000.0, 8000.0, 8000.0, 0.0, 0.0]
    assert s.values["mem_used"] == [0.0, 0.0, 0.0, 4096.0, 0.0, 0.0]
    assert s.values["cores_used"] == [0.0, 0.0, 0.0, 25.0, 0.0, 0.0]
    assert s.values["mem_total"] == [81920.0] * 6
    past = timeline.trends.series(Scope.CLUSTER, "cluster", Range.HOUR, until=1030.0)
    assert past.t == [1010.0, 1020.0, 1030.0]  # as at 1030: nothing after it
    node = timeline.trends.series(Scope.NODE, "n1", Range.HOUR, until=1075.0)
    # a node is sampled once a minute (the first base step in it): 1010 for 960-1020, then 1020
    assert node.step_s == 60.0 and node.t == [960.0] and node.values["mem_alloc"] == [8000.0]


def test_coarser_rings_keep_means_not_every_sample() -> None:
    trends = Trends(base_step_s=60.0)
    view = folded(inventory("n1", 1, ts=0.0))
    trends.advance(view, 1.0)
    for minute in range(1, 12):
        if minute == 3:
            view.apply(decided("a", "n1", mem=6000, ts=minute * 60.0 - 1))
        trends.advance(view, minute * 60.0 + 1)
    day = trends.series(Scope.NODE, "n1", Range.DAY, until=3600.0)
    assert day.step_s == 300.0 and day.t == [0.0, 300.0]
    # slot 0-300 s: samples at 60..240 s, allocated from the 180 s one on -> (0+0+6000+6000)/4
    assert day.values["mem_alloc"] == [3000.0, 6000.0]
    card = trends.series(Scope.CARD, card_id("n1", 0), Range.WEEK, until=3600.0)
    assert card.range is Range.HOUR  # a card's longest range is its last hour
    assert all(math.isfinite(v) for v in card.t)


def test_an_unknown_chart_range_is_a_bad_query() -> None:
    view = folded(inventory("n1"))
    with pytest.raises(BadQuery):
        page(view, None, "/", {"range": "decade"}, now=1001.0, trends=Trends())
    body = page(view, None, "/nodes/n1", {"range": "day"}, now=1001.0, trends=Trends())
    assert body["range"] == "day" and body["chart"]["t"] == [] and body["totals"]["cards"] == 2


def test_heartbeats_never_push_placements_out_of_the_feed() -> None:
    feed, view = Feed(3), ClusterView()
    absorb(view, raw(decided("a", "n1"), 1, 1001.0), feed)
    for seq in range(2, 12):
        absorb(view, raw(inventory("n1", ts=1000.0 + seq), seq, 1000.0 + seq), feed)
    assert [e.seq for e in feed.newest(FeedFilter(), 10)] == [1]
    assert [e.seq for e in feed.newest(FeedFilter(heartbeats=True), 10)] == [11, 10, 9, 1]
