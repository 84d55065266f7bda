"""``gpubus tap`` rendering and filters, pure: durations, subjects, filters, lines."""

from __future__ import annotations

import json

import pytest

from gpubus.tap import (
    TapFilter,
    full_subject,
    parse_since,
    render_json,
    render_undecodable,
    replay_from,
)
from shared.event_text import render_line
from shared.events import AllocationDecided, AllocationReleased, Inventory
from shared.model import Allocation, ContainerDevice, DeviceInfo, DeviceUUID, NodeName, PodUID


@pytest.mark.parametrize(("text", "seconds"), [("10m", 600), ("30s", 30), ("2h", 7200), ("1d", 86400),
                                               ("500ms", 0.5), ("45", 45)])
def test_since_durations(text: str, seconds: float) -> None:
    assert parse_since(text) == seconds


@pytest.mark.parametrize("text", ["", "ten minutes", "-5m", "5y"])
def test_bad_since_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_since(text)


NOW = 1_700_000_000.0


@pytest.mark.parametrize(("since", "replay_all", "deliver"), [
    (None, False, "new"), (None, True, "all"), ("10m", False, NOW - 600), ("100000d", False, "all")])
def test_replay_from_since_or_all(since: str | None, replay_all: bool, deliver: str | float) -> None:
    assert replay_from(since, replay_all, NOW) == deliver


def test_since_and_all_together_are_refused() -> None:
    with pytest.raises(ValueError, match="--since and --all"):
        replay_from("10m", True, NOW)


def test_node_filter_matches_the_subject_token_of_a_dotted_node_name() -> None:
    selector = TapFilter.parse("ip-10-0-0-1.ec2.internal", None)
    assert selector.matches_subject("gpubus.allocation.released.ip-10-0-0-1_ec2_internal")
    assert not selector.matches_subject("gpubus.allocation.released.other")


def test_subject_shorthand() -> None:
    assert full_subject("allocation.>") == "gpubus.allocation.>"
    assert full_subject("gpubus.>") == "gpubus.>"


def decided() -> AllocationDecided:
    dev = ContainerDevice(uuid=DeviceUUID("GPU-1"), usedmem=3000, usedcores=30)
    alloc = Allocation(pod_uid=PodUID("u"), namespace="team", name="train", node=NodeName("n1"),
                       devices=((dev,),), containers=("main",))
    return AllocationDecided(allocation=alloc, node="n1", ts=0.0)


def test_decided_line_shows_pod_and_cards() -> None:
    line = render_line(decided())
    assert "allocation.decided" in line and "n1" in line and "team/train" in line
    assert "GPU-1:3000MiB/30%" in line


def test_inventory_line_counts_devices() -> None:
    inv = Inventory(devices=(DeviceInfo(id=DeviceUUID("G"), type="NVIDIA-A100", devmem=1),), node="n2")
    assert "devices=1 healthy=1" in render_line(inv)


def test_filters_match_pod_inside_allocation_and_node() -> None:
    assert TapFilter.parse("n1", "team/train").matches(decided())
    assert not TapFilter.parse("n2", None).matches(decided())
    assert not TapFilter.parse(None, "team/other").matches(decided())
    assert TapFilter.parse("n1", None).matches_subject("gpubus.x.y.n1")


def test_bad_pod_filter_is_refused() -> None:
    with pytest.raises(ValueError, match="NAMESPACE/NAME"):
        TapFilter.parse(None, "just-a-name")


def test_json_line_is_the_wire_form() -> None:
    event = AllocationReleased(pod_uid="u", namespace="n", name="p", why="deleted")
    body = json.loads(render_json(event))
    assert body["kind"] == "allocation.released" and body["v"] == 1 and body["why"] == "deleted"


def test_undecodable_rendering() -> None:
    assert "UNDECODABLE gpubus.a.b.c (3 bytes): bad" in " ".join(
        render_undecodable("gpubus.a.b.c", 3, "bad", as_json=False).split())
    assert json.loads(render_undecodable("s", 1, "r", as_json=True))["undecodable"] is True


@pytest.mark.parametrize(("ts", "shown"), [(float("nan"), "ts=nan"), (float("inf"), "ts=inf"),
                                           (1e300, "ts=1e+300"), (-1e300, "ts=-1e+300")])
def test_a_time_no_clock_can_show_is_printed_as_its_raw_value(ts: float, shown: str) -> None:
    event = AllocationReleased(pod_uid="u", namespace="n", name="p", why="deleted", node="n1", ts=ts)
    assert render_line(event).split()[:3] == [shown, "allocation.released", "n1"]
