"""Namespace ResourceQuota checks at admission.

Case matrix: memory / cores limits x single card / multi-card x app containers / init containers
x several quota objects (tightest wins) x ``status.used`` x memoryFactor x quotas unreadable.
"""

from __future__ import annotations

from typing import Any

import pytest
from admission_builders import container, pod, run

from services.webhook.admission import QUOTA_UNKNOWN_WARNING, AdmissionSettings, Outcome
from services.webhook.quota import QuotaLimit, QuotaView
from shared.quota import parse_resource_quotas
from shared.requests import ResourceNames

GPU, MEM, CORES = "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"
NAMES = ResourceNames()


def view(*quotas: dict[str, Any], names: ResourceNames = NAMES) -> QuotaView:
    return QuotaView.from_parsed(parse_resource_quotas(quotas, names))


def test_only_limits_entries_of_gpu_memory_and_cores_are_read() -> None:
    q = {
        "metadata": {"name": "q"},
        "spec": {
            "hard": {
                "limits.nvidia.com/gpumem": "8000",
                "limits.nvidia.com/gpucores": 200,
                "requests.nvidia.com/gpumem": 1,
                "limits.nvidia.com/gpu": 4,
                "cpu": "4",
                "limits.nvidia.com/gpumem-percentage": 5,
            }
        },
    }
    assert view(q).limits == (
        QuotaLimit(quota="q", resource=MEM, hard=8000),
        QuotaLimit(quota="q", resource=CORES, hard=200),
    )


def test_unparsable_quota_values_are_skipped() -> None:
    q = {"metadata": {"name": "q"}, "spec": {"hard": {"limits.nvidia.com/gpumem": "lots"}}}
    assert view(q).limits == ()


MEM_QUOTA = {"metadata": {"name": "mem"}, "spec": {"hard": {"limits.nvidia.com/gpumem": "8000"}}}


@pytest.mark.parametrize(
    ("containers", "init", "fits"),
    [
        pytest.param([{GPU: 2, MEM: 3000}], [], True, id="2 cards x 3000 = 6000 fits 8000"),
        pytest.param([{GPU: 3, MEM: 3000}], [], False, id="3 cards x 3000 = 9000 exceeds 8000"),
        pytest.param([{GPU: 1, MEM: 3000}, {GPU: 2, MEM: 3000}], [], False, id="app containers add up"),
        pytest.param([{GPU: 2, MEM: 3000}], [{GPU: 1, MEM: 7000}], True, id="init peak 7000 fits"),
        pytest.param([{GPU: 2, MEM: 3000}], [{GPU: 3, MEM: 3000}], False, id="init 3 x 3000 exceeds"),
        pytest.param(
            [{GPU: 1, MEM: 1000}],
            [{GPU: 1, MEM: 5000}, {GPU: 1, MEM: 6000}],
            True,
            id="init containers run one at a time",
        ),
        pytest.param([{GPU: 1, MEM: 8000}], [], True, id="exactly the limit fits"),
    ],
)
def test_memory_quota_counts_every_card(
    containers: list[dict[str, Any]], init: list[dict[str, Any]], fits: bool
) -> None:
    obj = pod(
        *(container(f"c{i}", limits=lim) for i, lim in enumerate(containers)),
        init=[container(f"i{i}", limits=lim) for i, lim in enumerate(init)],
    )
    d = run(obj, quotas=view(MEM_QUOTA))
    assert d.allowed is fits
    if not fits:
        assert (d.code, d.message, d.outcome) == (403, "exceeding resource quota", Outcome.QUOTA_EXCEEDED)
        assert d.warnings == ("ResourceQuota mem: limits.nvidia.com/gpumem is 8000",)


def test_injected_exclusive_cores_count_against_the_core_quota() -> None:
    cores = {"metadata": {"name": "c"}, "spec": {"hard": {"limits.nvidia.com/gpucores": "150"}}}
    assert run(pod(container(limits={GPU: 1})), quotas=view(cores)).allowed
    assert not run(pod(container(limits={GPU: 2})), quotas=view(cores)).allowed


def test_the_tightest_quota_object_wins() -> None:
    loose = {"metadata": {"name": "loose"}, "spec": {"hard": {"limits.nvidia.com/gpumem": "100000"}}}
    tight = {"metadata": {"name": "tight"}, "spec": {"hard": {"limits.nvidia.com/gpumem": "1000"}}}
    d = run(pod(container(limits={GPU: 1, MEM: 2000})), quotas=view(loose, tight))
    assert not d.allowed and d.warnings == ("ResourceQuota tight: limits.nvidia.com/gpumem is 1000",)


def test_usage_reported_in_quota_status_is_counted() -> None:
    q = {
        "metadata": {"name": "q"},
        "spec": {"hard": {"limits.nvidia.com/gpumem": "8000"}},
        "status": {"used": {"limits.nvidia.com/gpumem": "7000"}},
    }
    assert not run(pod(container(limits={GPU: 1, MEM: 2000})), quotas=view(q)).allowed
    assert run(pod(container(limits={GPU: 1, MEM: 1000})), quotas=view(q)).allowed


def test_zero_limit_blocks_any_memory() -> None:
    q = {"metadata": {"name": "q"}, "spec": {"hard": {"limits.nvidia.com/gpumem": 0}}}
    assert not run(pod(container(limits={GPU: 1, MEM: 1})), quotas=view(q)).allowed


def test_memory_factor_scales_request_and_limit_alike() -> None:
    names = ResourceNames(memory_factor=1024)
    settings = AdmissionSettings(names=names)
    assert run(pod(container(limits={GPU: 2, MEM: 4})), settings, quotas=view(MEM_QUOTA, names=names)).allowed
    d = run(pod(container(limits={GPU: 3, MEM: 3000})), settings, quotas=view(MEM_QUOTA, names=names))
    assert not d.allowed


def test_pods_without_gpu_are_not_checked() -> None:
    q = {"metadata": {"name": "q"}, "spec": {"hard": {"limits.nvidia.com/gpumem": 0}}}
    assert run(pod(container()), quotas=view(q)).allowed


def test_unreadable_quotas_admit_with_a_warning() -> None:
    d = run(pod(container(limits={GPU: 9, MEM: 99999})), quotas=QuotaView(unknown=True))
    assert d.allowed and d.warnings == (QUOTA_UNKNOWN_WARNING,)
