"""Bad input at the extender's HTTP edge: a clear Error, the documented status, a counted metric.

Matrix: filter/bind/prioritize with a body over 1 MiB, a body that is not JSON, a JSON array, a
missing pod, an invalid GPU quantity, bad binding args, a bind for a pod that does not exist,
unparsable scoring weights; after all of it the scheduler still answers.
"""

from __future__ import annotations

import pytest
from scheduler_harness import ExtenderClient, gpu_pod

from services.scheduler.app import SchedulerApp
from shared import annotations as ann

pytest_plugins = ("scheduler_fixtures",)

BIG = b'{"Pod": {}, "NodeNames": ["' + b"n" * (1 << 20) + b'"]}'


@pytest.mark.parametrize(
    ("verb", "raw", "status", "message", "kind"),
    [
        ("filter", BIG, 200, "exceeds the 1048576 byte (1 MiB) limit", "too_large"),
        ("filter", b"{nope", 400, "request body is not valid JSON", "not_json"),
        ("filter", b"[]", 200, "request body must be a JSON object", "not_object"),
        ("filter", b'{"NodeNames": ["a"]}', 200, "extender args missing pod", "missing_pod"),
        ("bind", BIG, 200, "exceeds the 1048576 byte (1 MiB) limit", "too_large"),
        ("bind", b"\xff\xfe", 400, "request body is not valid JSON", "not_json"),
        ("bind", b'{"PodName": "p"}', 200, "binding args need string PodName", "bad_binding"),
        ("prioritize", b"{nope", 400, "request body is not valid JSON", "not_json"),
        ("prioritize", b'{"NodeNames": []}', 400, "extender args missing pod", "missing_pod"),
    ],
)
async def test_bad_body_gets_a_clear_error_and_is_counted(  # noqa: PLR0917 (fixtures)
    client: ExtenderClient, verb: str, raw: bytes, status: int, message: str, kind: str
) -> None:
    got_status, body = await client.post(verb, None, raw=raw)
    assert got_status == status
    assert message in body["Error"]
    _, metrics = await client.get("/metrics")
    assert f'gpubus_scheduler_bad_requests_total{{kind="{kind}",verb="{verb}"}} 1.0' in metrics
    assert (await client.get("/healthz"))[0] == 200


async def test_invalid_gpu_quantity_is_refused_with_the_container_named(client: ExtenderClient) -> None:
    pod = gpu_pod("p", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "lots"})
    status, body = await client.post("filter", {"Pod": pod, "NodeNames": ["n1"]})
    assert status == 200
    assert "container 'c0'" in body["Error"] and "nvidia.com/gpumem='lots' is invalid" in body["Error"]


async def test_bad_scoring_weights_fail_filter_with_the_parse_error(client: ExtenderClient) -> None:
    pod = gpu_pod("p", {"nvidia.com/gpu": "1"}, annotations={ann.DEVICE_SCORING_WEIGHTS: "slot=1"})
    pod["metadata"]["uid"] = "u-1"
    status, body = await client.post("filter", {"Pod": pod, "NodeNames": ["n1"]})
    assert status == 200
    assert ann.DEVICE_SCORING_WEIGHTS in body["Error"]


async def test_bind_for_a_pod_that_does_not_exist_says_so(
    client: ExtenderClient, scheduler: SchedulerApp
) -> None:
    status, body = await client.post(
        "bind", {"PodName": "nobody", "PodNamespace": "default", "PodUID": "u-x", "Node": "n1"}
    )
    assert status == 200
    assert body["Error"] == "pod default/nobody does not exist"
    _, metrics = await client.get("/metrics")
    assert 'gpubus_scheduler_decisions_total{outcome="pod_not_found",verb="bind"} 1.0' in metrics
