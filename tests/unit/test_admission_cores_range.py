"""``nvidia.com/gpucores`` is % of one card's compute: a value outside 0..100 is refused at
admission with a clear message (400), never admitted and clamped later by Fit.

Case matrix: 101, 150 and 1000 in limits; 101 in requests only; 101 in an init container; a
custom cores resource name; 0 and 100 still admitted (the edges).
"""

from __future__ import annotations

import pytest
from admission_builders import container, pod, run

from services.webhook.admission import AdmissionSettings, Outcome
from shared.requests import ResourceNames

GPU, CORES = "nvidia.com/gpu", "nvidia.com/gpucores"


@pytest.mark.parametrize("cores", [101, 150, 1000])
def test_cores_over_100_are_refused_naming_value_and_container(cores: int) -> None:
    d = run(pod(container("train", limits={GPU: 1, CORES: cores})))
    assert (d.allowed, d.code, d.outcome) == (False, 400, Outcome.INVALID_QUANTITY)
    assert d.message == (f"invalid nvidia.com/gpucores value {cores} in container train: "
                         "must be an integer between 0 and 100 (% of one card's compute)")


def test_cores_in_requests_only_are_checked_too() -> None:
    d = run(pod(container("train", limits={GPU: 1}, requests={CORES: "101"})))
    assert not d.allowed and "nvidia.com/gpucores value 101" in d.message


def test_cores_over_100_in_an_init_container_are_refused() -> None:
    obj = pod(container("main", limits={GPU: 1}))
    obj["spec"]["initContainers"] = [container("setup", limits={GPU: 1, CORES: 101})]
    d = run(obj)
    assert (d.allowed, d.code) == (False, 400) and "in container setup:" in d.message


def test_a_custom_cores_name_is_range_checked() -> None:
    names = ResourceNames(count="hami.io/gpu", cores="hami.io/gpucores", memory="hami.io/gpumem")
    d = run(pod(container("c", limits={"hami.io/gpu": 1, "hami.io/gpucores": 101})),
            AdmissionSettings(names=names))
    assert not d.allowed and "invalid hami.io/gpucores value 101" in d.message


@pytest.mark.parametrize("cores", [0, 100])
def test_the_edges_are_admitted(cores: int) -> None:
    assert run(pod(container("c", limits={GPU: 1, CORES: cores}))).allowed
