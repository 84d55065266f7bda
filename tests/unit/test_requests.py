"""Request derivation as HAMi does it (reference §1).

Cases: bare count, count+memory, memory without count, percentage clamping and the 101 sentinel,
defaults (defaultMemory, defaultCores, defaultGPUNum), memoryFactor, limits over requests per resource,
containers without GPU, init containers first, and every kind of invalid quantity (non-ASCII digits,
values beyond int64, exponents too large to compute).
"""

from __future__ import annotations

import pytest

from shared.errors import RequestError
from shared.model import ContainerRequest
from shared.requests import (
    DEFAULT_NAMES,
    InvalidQuantity,
    ResourceNames,
    container_request,
    parse_quantity,
    pod_request,
)


def ctr(
    limits: dict[str, object] | None = None, requests: dict[str, object] | None = None
) -> dict[str, object]:
    return {"name": "main", "resources": {"limits": limits or {}, "requests": requests or {}}}


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"nvidia.com/gpu": 1}, ContainerRequest(nums=1, memreq=0, mempercentagereq=100, coresreq=0)),
        ({"nvidia.com/gpu": 2, "nvidia.com/gpumem": 4096}, ContainerRequest(nums=2, memreq=4096)),
        (
            {"nvidia.com/gpumem": 2000, "nvidia.com/gpumem-percentage": 0},
            ContainerRequest(nums=1, memreq=2000),
        ),
        (
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"},
            ContainerRequest(nums=1, mempercentagereq=100),
        ),
        (
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": -5},
            ContainerRequest(nums=1, mempercentagereq=100),
        ),
        (
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 30, "nvidia.com/gpucores": 40},
            ContainerRequest(nums=1, mempercentagereq=30, coresreq=40),
        ),
        ({"nvidia.com/gpucores": 100}, ContainerRequest(nums=1, mempercentagereq=100, coresreq=100)),
        ({"nvidia.com/gpu": "1k", "nvidia.com/gpumem": "1Ki"}, ContainerRequest(nums=1000, memreq=1024)),
    ],
)
def test_hami_request_examples(limits: dict[str, object], expected: ContainerRequest) -> None:
    assert container_request(ctr(limits), name="main") == expected


def test_container_without_gpu_resources_has_no_request() -> None:
    assert container_request({"name": "x", "resources": {"limits": {"cpu": "1"}}}) is None
    assert container_request({"name": "x"}) is None


def test_zero_count_is_not_a_gpu_container() -> None:
    assert container_request(ctr({"nvidia.com/gpu": 0, "nvidia.com/gpumem": 10})) is None


def test_limits_win_over_requests_per_resource() -> None:
    got = container_request(
        ctr({"nvidia.com/gpumem": 3000}, {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 1000})
    )
    assert got == ContainerRequest(nums=2, memreq=3000)


def test_default_memory_applies_when_neither_memory_nor_percentage_given() -> None:
    names = ResourceNames(default_memory=5000, default_cores=10)
    assert container_request(ctr({"nvidia.com/gpu": 1}), names) == ContainerRequest(
        nums=1, memreq=5000, coresreq=10
    )


def test_default_gpu_num_is_implied_by_memory_without_count() -> None:
    names = ResourceNames(default_gpu_num=2)
    assert container_request(ctr({"nvidia.com/gpumem": 100}), names) == ContainerRequest(nums=2, memreq=100)


def test_memory_factor_multiplies_gpumem() -> None:
    got = container_request(
        ctr({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4}), ResourceNames(memory_factor=1024)
    )
    assert got == ContainerRequest(nums=1, memreq=4096)


def test_custom_resource_names() -> None:
    names = ResourceNames(count="example.com/vgpu", memory="example.com/vmem")
    assert container_request(ctr({"example.com/vgpu": 1, "example.com/vmem": 7}), names) == ContainerRequest(
        nums=1, memreq=7
    )


@pytest.mark.parametrize(
    ("limits", "resource"),
    [
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "16Gi"}, "nvidia.com/gpumem"),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "16.5"}, "nvidia.com/gpumem"),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "lots"}, "nvidia.com/gpumem"),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": -1}, "nvidia.com/gpumem"),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": True}, "nvidia.com/gpumem"),
        ({"nvidia.com/gpu": "two"}, "nvidia.com/gpu"),
        ({"nvidia.com/gpu": -1}, "nvidia.com/gpu"),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpucores": "half"}, "nvidia.com/gpucores"),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": "x"}, "nvidia.com/gpumem-percentage"),
        ({"nvidia.com/gpu": "\uff11"}, "nvidia.com/gpu"),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpucores": "\u0665\u0660"}, "nvidia.com/gpucores"),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "1e5000"}, "nvidia.com/gpumem"),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": "1e5000"}, "nvidia.com/gpumem-percentage"),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 10**5000}, "nvidia.com/gpumem-percentage"),
    ],
)
def test_invalid_quantity_names_container_resource_and_value(
    limits: dict[str, object], resource: str
) -> None:
    with pytest.raises(InvalidQuantity) as err:
        container_request(ctr(limits), name="main")
    assert err.value.container == "main"
    assert err.value.resource == resource
    assert resource in str(err.value) and "'main'" in str(err.value)
    assert isinstance(err.value, RequestError)


def test_memory_over_int32_divided_by_factor_is_invalid() -> None:
    with pytest.raises(InvalidQuantity, match="exceeds"):
        container_request(
            ctr({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2**31 // 2}), ResourceNames(memory_factor=4)
        )


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("12", 12),
        (12, 12),
        (12.0, 12),
        ("1e3", 1000),
        ("2M", 2 * 10**6),
        ("1500m", None),
        (" 7 ", 7),
        ("+3", 3),
        ("1000e-3", 1),
        ("7Ei", 7 * 2**60),
        ("1e18", 10**18),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775807", -(2**63 - 1)),
        (2**63 - 1, 2**63 - 1),
    ],
)
def test_parse_quantity(raw: object, value: int | None) -> None:
    if value is None:
        with pytest.raises(ValueError):
            parse_quantity(raw)
    else:
        assert parse_quantity(raw) == value


@pytest.mark.parametrize(
    "raw",
    [
        "1e5000",
        "-1e5000",
        "1e10000000",
        "1e-10000000",
        "0e99999999999999999999",
        "9" * 100,
        "1" + "0" * 19,
        "9223372036854775808",
        "8Ei",
        2**63,
        -(2**63),
        1e300,
    ],
)
def test_quantities_beyond_int64_or_with_huge_exponents_are_refused(raw: object) -> None:
    """Bounded on the text before any arithmetic, so "1e10000000" (11 bytes) costs no CPU."""
    with pytest.raises(ValueError, match=r"range|digits"):
        parse_quantity(raw)


@pytest.mark.parametrize("raw", ["\uff11", "\u0665\u0660", "1e\u0663", "\u0661.5k", "\U0001d7d9"])
def test_quantities_take_ascii_digits_only(raw: str) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(raw)


def test_pod_request_puts_init_containers_first() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": {"a": "b"}},
        "spec": {
            "containers": [{"name": "app", "resources": {"limits": {"nvidia.com/gpu": 1}}}, {"name": "side"}],
            "initContainers": [{"name": "init", "resources": {"limits": {"nvidia.com/gpumem": 10}}}],
        },
    }
    req = pod_request(pod, DEFAULT_NAMES)
    assert [(c.name, c.init, c.request is not None) for c in req.containers] == [
        ("init", True, True),
        ("app", False, True),
        ("side", False, False),
    ]
    assert (req.namespace, req.name, req.uid, req.annotations) == ("ns", "p", "u1", {"a": "b"})
    assert req.wants_gpu


@pytest.mark.parametrize(
    "pod",
    [
        {"spec": {"containers": "nope"}},
        {"spec": []},
        {"metadata": {"annotations": 3}},
        {"spec": {"containers": [{"name": "a", "resources": {"limits": [1]}}]}},
    ],
)
def test_malformed_pod_structure_is_a_request_error(pod: dict[str, object]) -> None:
    with pytest.raises(RequestError):
        pod_request(pod)
