"""Scores and orderings (reference §3b, §3c).

Cases: device score formula and its production quirk (request term only when types are equal), zero
denominators, scoring-weights parsing (valid forms and every error), the sort keys per policy, comma
chains and numa-bind, node score, node choice per node policy, topology-aware combinations.
"""

from __future__ import annotations

import pytest

from services.scheduler.score import (
    ScoringWeights,
    best_node,
    device_score,
    node_score,
    order_keys,
    parse_scoring_weights,
    pick_topology,
    policy_chain,
    rank_nodes,
)
from shared.errors import AnnotationError
from shared.model import ContainerRequest, DeviceInfo, DeviceUsage, DeviceUUID

CARD = DeviceInfo(id=DeviceUUID("G"), type="NVIDIA", devmem=1000, count=10, devcore=100)


def test_device_score_formula_with_request_term() -> None:
    req = ContainerRequest(nums=1, memreq=100, coresreq=10)
    assert device_score(CARD, 1, 200, 20, request=req) == pytest.approx(10 * (2 / 10 + 30 / 100 + 300 / 1000))


def test_device_score_percentage_request_uses_registered_memory() -> None:
    req = ContainerRequest(nums=1, mempercentagereq=50)
    assert device_score(CARD, 0, 0, 0, request=req) == pytest.approx(10 * (1 / 10 + 500 / 1000))


def test_device_score_ignores_request_when_model_differs_from_vendor_word() -> None:
    card = DeviceInfo(id=DeviceUUID("G"), type="NVIDIA-Tesla T4", devmem=1000)
    req = ContainerRequest(nums=1, memreq=500, coresreq=50)
    assert device_score(card, 1, 100, 10, request=req) == pytest.approx(10 * (1 / 10 + 10 / 100 + 100 / 1000))


def test_device_score_zero_capacity_is_zero() -> None:
    card = DeviceInfo(id=DeviceUUID("G"), type="NVIDIA", devmem=0)
    assert device_score(card, 3, 3, 3, request=None) == 0.0


def test_device_score_weights() -> None:
    w = ScoringWeights(slot=0, core=2, memory=0)
    assert device_score(CARD, 5, 500, 50, request=None, weights=w) == pytest.approx(10)


@pytest.mark.parametrize(
    ("text", "weights"),
    [
        ("slot=1,core=1,memory=1", ScoringWeights()),
        (" memory = 3 , slot=0,core=2", ScoringWeights(slot=0, core=2, memory=3)),
        (None, ScoringWeights()),
        ("slot=1000000,core=0,memory=00000000000001", ScoringWeights(slot=1_000_000, core=0, memory=1)),
    ],
)
def test_parse_scoring_weights(text: str | None, weights: ScoringWeights) -> None:
    assert parse_scoring_weights(text) == weights


@pytest.mark.parametrize(
    "text",
    [
        "",
        "slot=1,core=1",
        "slot=1,core=1,memory=1,gpu=1",
        "slot=1,core=1,memory=-1",
        "slot=0,core=0,memory=0",
        "slot=a,core=1,memory=1",
        "slot=1,slot=1,memory=1",
        "slot:1,core=1,memory=1",
        "slot=\u00b2,core=1,memory=1",  # a digit to str.isdigit(), not to int()
        "slot=1000001,core=1,memory=1",
        "slot=1" + "0" * 400 + ",core=1,memory=1",  # would overflow the score's float division
        "slot=" + "9" * 5000 + ",core=1,memory=1",  # beyond int()'s 4300-digit limit
    ],
)
def test_bad_scoring_weights_are_errors(text: str) -> None:
    with pytest.raises(AnnotationError, match="device-scoring-weights"):
        parse_scoring_weights(text)


@pytest.mark.parametrize(
    ("policy", "numa_bind", "keys"),
    [
        ("binpack", False, ("score_asc", "numa_asc", "index_asc")),
        ("spread", False, ("score_desc", "numa_asc", "index_asc")),
        ("topology-aware", False, ("score_desc", "numa_asc", "index_asc")),
        ("whatever", False, ("score_desc", "numa_asc", "index_asc")),
        ("mutex", False, ("used_desc", "numa_asc", "index_asc")),
        ("binpack", True, ("numa_desc", "score_asc", "index_asc")),
        ("spread", True, ("numa_asc", "score_desc", "index_asc")),
        ("numa", False, ("numa_asc", "index_asc")),
        ("binpack,numa", False, ("score_asc", "numa_asc", "index_asc")),
        ("numa, spread", False, ("numa_asc", "score_desc", "index_asc")),
        ("mutex,topology-aware", False, ("score_desc", "index_asc")),
        ("binpack,mutex", True, ("numa_asc", "score_asc", "index_asc")),
        ("", False, ("score_desc", "index_asc")),
    ],
)
def test_order_keys(policy: str, numa_bind: bool, keys: tuple[str, ...]) -> None:
    assert order_keys(policy_chain(policy), numa_bind) == keys


def test_node_score_sums_over_the_node() -> None:
    devices = [CARD, CARD]
    usage = [DeviceUsage(used=2, usedmem=500, usedcores=50), DeviceUsage()]
    assert node_score(devices, usage) == pytest.approx(10 * (2 / 20 + 50 / 200 + 500 / 2000))
    assert node_score([], []) == 0.0


def test_best_node_and_rank_per_policy() -> None:
    fits = [("b", 1.0), ("a", 3.0), ("c", 3.0)]
    assert best_node(fits, "binpack") == "a"
    assert best_node(fits, "spread") == "b"
    assert best_node([], "binpack") is None
    assert [n for n, _ in rank_nodes(fits, "binpack")] == ["a", "c", "b"]
    assert [n for n, _ in rank_nodes(fits, "spread")] == ["b", "a", "c"]


def test_pick_topology_combinations_and_ties() -> None:
    scores = {"A": {"B": 10, "C": 60}, "B": {"C": 100}}
    assert pick_topology(["A", "B", "C"], 2, scores) == (1, 2)
    assert pick_topology(["A", "B", "C"], 2, {}) == (0, 1)
    assert pick_topology(["A", "B", "C"], 1, scores) == (0,)
