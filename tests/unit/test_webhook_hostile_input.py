"""Admission and review decoding against hostile input: refused with a reason, never a crash.

Case matrix:
- ``nvidia.com/priority``: beyond int32, negative, huge exponent, non-ASCII digits -> InvalidQuantity;
  0 and 1 still become ``CUDA_TASK_PRIORITY``
- ``nvidia.com/gpumem-percentage`` with a huge exponent or integer -> InvalidQuantity naming it
- limiter env vars set through Kubernetes ``$(VAR)`` expansion (``LD_PRELOAD``, the core policy),
  including the ``$$(`` escape, and a core policy value that is a list -> LimiterTampering
- ``apiVersion`` that is a list, an object, a number or null -> BadReview ``unsupported_version``
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from admission_builders import container, env_of, mutated, pod, run

from services.webhook.admission import Outcome
from services.webhook.errors import BadRequestKind, BadReview
from services.webhook.reviews import decode_review

GPU = "nvidia.com/gpu"
PCT = "nvidia.com/gpumem-percentage"
PRIO = "nvidia.com/priority"
LIBCUDA = "/usr/lib/x86_64-linux-gnu/libcuda.so.1"


@pytest.mark.parametrize("value", ["99999999999999999999", "2147483648", "-7", -1, "1e5000", "\uff11"])
def test_priority_outside_a_c_int_is_an_invalid_quantity(value: object) -> None:
    d = run(pod(container("train", limits={GPU: 1, PRIO: value})))
    assert (d.allowed, d.code, d.outcome) == (False, 400, Outcome.INVALID_QUANTITY)
    assert "'train'" in d.message and PRIO in d.message
    assert not d.patch


@pytest.mark.parametrize(("value", "env"), [(0, "0"), ("1", "1"), ("1e1", "10")])
def test_priority_in_range_still_becomes_the_task_priority_env(value: object, env: str) -> None:
    assert env_of(mutated(pod(container(limits={GPU: 1, PRIO: value})))) == {"CUDA_TASK_PRIORITY": env}


@pytest.mark.parametrize("value", ["1e5000", pytest.param(10**5000, id="10**5000"), "1e10000000"])
def test_percentage_too_large_to_compute_is_an_invalid_quantity(value: object) -> None:
    d = run(pod(container("train", limits={GPU: 1, PCT: value})))
    assert (d.allowed, d.code, d.outcome) == (False, 400, Outcome.INVALID_QUANTITY)
    assert "'train'" in d.message and PCT in d.message


@pytest.mark.parametrize(
    "env",
    [
        [{"name": "X", "value": LIBCUDA}, {"name": "LD_PRELOAD", "value": "$(X)"}],
        [{"name": "X", "value": "libcuda.so.1"}, {"name": "LD_PRELOAD", "value": "/opt/$(X):/lib/ok.so"}],
        [{"name": "LD_PRELOAD", "value": "$(FROM_A_CONFIGMAP)"}],
        [{"name": "LD_PRELOAD", "value": "$$(X)"}],
        [{"name": "X", "value": "disable"}, {"name": "GPU_CORE_UTILIZATION_POLICY", "value": "$(X)"}],
        [{"name": "GPU_CORE_UTILIZATION_POLICY", "value": ["disable"]}],
        [{"name": "GPU_CORE_UTILIZATION_POLICY", "value": {"v": "disable"}}],
    ],
)
@pytest.mark.parametrize("where", ["containers", "initContainers"])
def test_limiter_env_from_a_variable_reference_is_refused(env: list[dict[str, Any]], where: str) -> None:
    c = container("train", limits={GPU: 1}, env=env)
    obj = pod(c) if where == "containers" else pod(container("app", limits={GPU: 1}), init=[c])
    d = run(obj)
    assert (d.allowed, d.outcome) == (False, Outcome.LIMITER_TAMPERING)
    assert "container train" in d.message


def test_a_harmless_preload_without_references_is_still_admitted() -> None:
    env = [{"name": "LD_PRELOAD", "value": "/usr/lib/libjemalloc.so.2"}]
    assert run(pod(container(limits={GPU: 1}, env=env))).allowed


@pytest.mark.parametrize("api_version", [["admission.k8s.io/v1"], {"v": 1}, 5, None, True])
def test_an_api_version_that_is_not_a_string_is_unsupported(api_version: object) -> None:
    body = orjson.dumps({"apiVersion": api_version, "kind": "AdmissionReview", "request": {"uid": "u"}})
    with pytest.raises(BadReview) as err:
        decode_review(body)
    assert err.value.kind is BadRequestKind.UNSUPPORTED_VERSION
    assert "unsupported AdmissionReview apiVersion" in err.value.message
