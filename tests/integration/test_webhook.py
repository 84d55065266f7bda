"""The webhook over real HTTPS on a loopback socket, with a CA generated per test session.

Case matrix: AdmissionReview v1 / v1beta1 x ``/webhook`` / ``/mutate`` x admitted / denied;
bad bodies (not JSON, not a review, unknown or non-string version, no request, no uid, object not a
map, over 1 MiB with and without Content-Length); a compressed body (any Content-Encoding but
identity) refused, identity reviewed; out-of-range quantities denied;
``/healthz`` ``/readyz`` ``/metrics``; NATS down (admission still answers, events go out once NATS
is up); events on a real NATS.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import logging
import ssl
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
from asyncwait import wait_until
from natsproc import NatsServerProcess, free_port

from services.webhook.app import Webhook
from services.webhook.settings import WebhookSettings
from shared.bus import Bus, BusSettings
from shared.events import Event, PodAdmitted, PodRejected

UID = "705ab4f5-6393-11e8-b7cc-42010a800002"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def cert_files(ca: trustme.CA, tmp_path: Path) -> tuple[Path, Path]:
    issued = ca.issue_cert("localhost", "127.0.0.1")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    return cert, key


def dead_nats() -> BusSettings:
    """A NATS URL nobody listens on."""
    return BusSettings(url=f"nats://127.0.0.1:{free_port()}", reconnect_wait_s=0.1)


@asynccontextmanager
async def serving(
    cert_files: tuple[Path, Path], bus: BusSettings | None = None, **overrides: Any
) -> AsyncIterator[Webhook]:
    cert, key = cert_files
    settings = WebhookSettings(bind="127.0.0.1", port=0, cert=str(cert), key=str(key), **overrides)
    async with Webhook(settings, bus or dead_nats()) as webhook:
        yield webhook


@asynccontextmanager
async def client(ca: trustme.CA) -> AsyncIterator[aiohttp.ClientSession]:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
        yield session


def review(obj: dict[str, Any], api_version: str = "admission.k8s.io/v1", **request: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "team-a",
            "name": obj["metadata"].get("name", ""),
            "object": obj,
            **request,
        },
    }


def gpu_pod(name: str = "train", **limits: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [
                {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": 1, **limits}}}
            ],
        },
    }


async def post(
    session: aiohttp.ClientSession,
    webhook: Webhook,
    body: Any,
    path: str = "/webhook",
    headers: dict[str, str] | None = None,
    **kw: Any,
) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) or not isinstance(body, dict | list) else json.dumps(body).encode()
    if isinstance(data, bytes) and len(data) > 1 << 20:
        data = io.BytesIO(data)  # aiohttp warns about big raw bytes bodies
    async with session.post(
        f"https://localhost:{webhook.port}{path}",
        data=data,
        headers={"Content-Type": "application/json", **(headers or {})},
        **kw,
    ) as resp:
        return resp.status, await resp.json()


async def metrics_text(session: aiohttp.ClientSession, webhook: Webhook) -> str:
    async with session.get(f"https://localhost:{webhook.port}/metrics") as resp:
        return await resp.text()


@pytest.mark.parametrize("api_version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
@pytest.mark.parametrize("path", ["/webhook", "/mutate"])
async def test_gpu_pod_round_trip_over_https(
    ca: trustme.CA, cert_files: tuple[Path, Path], api_version: str, path: str
) -> None:
    async with serving(cert_files) as webhook, client(ca) as session:
        status, body = await post(session, webhook, review(gpu_pod(), api_version), path)
    assert status == 200
    assert (body["apiVersion"], body["kind"]) == (api_version, "AdmissionReview")
    response = body["response"]
    assert response["uid"] == UID and response["allowed"] is True and response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == [
        {"op": "replace", "path": "/spec/schedulerName", "value": "gpubus-scheduler"},
        {"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpucores", "value": "100"},
    ]


async def test_denial_is_allowed_false_with_a_403_status(
    ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    obj = gpu_pod()
    obj["spec"]["nodeName"] = "node-1"
    async with serving(cert_files) as webhook, client(ca) as session:
        status, body = await post(session, webhook, review(obj))
        text = await metrics_text(session, webhook)
    assert status == 200
    assert body["response"] == {
        "uid": UID,
        "allowed": False,
        "status": {"code": 403, "message": "pod has node assigned"},
    }
    assert 'gpubus_webhook_requests_total{result="denied"} 1.0' in text
    assert 'gpubus_webhook_decisions_total{outcome="NodeAssigned"} 1.0' in text


async def test_pod_without_gpu_gets_no_patch(ca: trustme.CA, cert_files: tuple[Path, Path]) -> None:
    obj = {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "nginx"}]}}
    async with serving(cert_files) as webhook, client(ca) as session:
        status, body = await post(session, webhook, review(obj))
    assert status == 200 and body["response"] == {"uid": UID, "allowed": True}


async def test_a_delete_review_with_a_null_object_is_allowed_not_errored(
    ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    body = review(gpu_pod(), operation="DELETE", object=None, oldObject=gpu_pod())
    async with serving(cert_files) as webhook, client(ca) as session:
        status, answer = await post(session, webhook, body)
        text = await metrics_text(session, webhook)
    assert status == 200 and answer["response"] == {"uid": UID, "allowed": True}
    assert 'gpubus_webhook_decisions_total{outcome="NotOurs"} 1.0' in text


BAD_BODIES = [
    pytest.param(b"{not json", "not_json", id="not JSON"),
    pytest.param(b"[1, 2]", "not_a_review", id="a JSON list"),
    pytest.param({"apiVersion": "v1", "kind": "Pod"}, "not_a_review", id="not a review"),
    pytest.param(
        {"apiVersion": "admission.k8s.io/v2", "kind": "AdmissionReview", "request": {}},
        "unsupported_version",
        id="unknown version",
    ),
    pytest.param(
        {"apiVersion": ["admission.k8s.io/v1"], "kind": "AdmissionReview", "request": {}},
        "unsupported_version",
        id="version a list",
    ),
    pytest.param(
        {"apiVersion": {"v": 1}, "kind": "AdmissionReview", "request": {}},
        "unsupported_version",
        id="version an object",
    ),
    pytest.param(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "missing_request", id="no request"
    ),
    pytest.param(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"operation": "CREATE"}},
        "missing_uid",
        id="no uid",
    ),
    pytest.param(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": UID, "operation": "CREATE", "object": "pod"},
        },
        "bad_object",
        id="object a string",
    ),
]


@pytest.mark.parametrize(("body", "kind"), BAD_BODIES)
async def test_malformed_reviews_get_400_with_a_reason(
    ca: trustme.CA, cert_files: tuple[Path, Path], body: Any, kind: str
) -> None:
    async with serving(cert_files) as webhook, client(ca) as session:
        status, answer = await post(session, webhook, body)
        text = await metrics_text(session, webhook)
    assert status == 400
    assert answer["kind"] == "AdmissionReview" and answer["response"]["allowed"] is False
    assert answer["response"]["status"]["code"] == 400 and answer["response"]["status"]["message"]
    assert f'gpubus_webhook_bad_requests_total{{kind="{kind}"}} 1.0' in text


async def test_a_known_uid_is_echoed_in_a_400(ca: trustme.CA, cert_files: tuple[Path, Path]) -> None:
    body = {
        "apiVersion": "admission.k8s.io/v1beta1",
        "kind": "AdmissionReview",
        "request": {"uid": UID, "operation": "CREATE", "object": None},
    }
    async with serving(cert_files) as webhook, client(ca) as session:
        status, answer = await post(session, webhook, body)
    assert status == 400 and answer["apiVersion"] == "admission.k8s.io/v1beta1"
    assert answer["response"]["uid"] == UID


async def test_bodies_over_one_mebibyte_are_refused_with_413(
    ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    big = review(gpu_pod())
    big["request"]["object"]["metadata"]["annotations"] = {"padding": "x" * (1 << 20)}

    async def chunks() -> AsyncIterator[bytes]:
        data = json.dumps(big).encode()
        for i in range(0, len(data), 65536):
            yield data[i : i + 65536]

    async with serving(cert_files) as webhook, client(ca) as session:
        status, answer = await post(session, webhook, big)
        assert status == 413 and "exceeds the 1048576 byte limit" in answer["response"]["status"]["message"]
        status, answer = await post(session, webhook, chunks())
        assert status == 413 and "1048576 byte limit" in answer["response"]["status"]["message"]
        status, _ = await post(session, webhook, review(gpu_pod()))
        assert status == 200
        assert 'gpubus_webhook_bad_requests_total{kind="too_large"} 2.0' in await metrics_text(
            session, webhook
        )


def errors_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


ENCODED = [
    pytest.param("gzip", gzip.compress(json.dumps(review(gpu_pod())).encode()), id="gzip"),
    pytest.param("deflate", zlib.compress(json.dumps(review(gpu_pod())).encode()), id="deflate"),
    pytest.param("gzip", b"not-compressed-at-all", id="gzip garbage"),
    pytest.param("deflate", b"not-compressed-at-all", id="deflate garbage"),
    pytest.param("gzip", gzip.compress(b" " * (8 << 20)), id="gzip bomb"),
    pytest.param("br", b"\x1b\x00\x00", id="br"),
    pytest.param("zstd", b"\x28\xb5\x2f\xfd", id="zstd"),
    pytest.param("compress", b"x", id="unknown"),
]


@pytest.mark.parametrize(("encoding", "data"), ENCODED)
async def test_an_encoded_body_is_a_counted_400_without_a_traceback(
    ca: trustme.CA,
    cert_files: tuple[Path, Path],
    caplog: pytest.LogCaptureFixture,
    encoding: str,
    data: bytes,
) -> None:
    # the API server sends plain JSON; aiohttp's own decoding answered garbage with a 500
    async with serving(cert_files) as webhook, client(ca) as session:
        status, answer = await post(session, webhook, data, headers={"Content-Encoding": encoding})
        text = await metrics_text(session, webhook)
    assert status == 400
    assert answer["kind"] == "AdmissionReview" and answer["response"]["allowed"] is False
    status_ = answer["response"]["status"]
    assert status_["code"] == 400 and "plain JSON" in status_["message"]
    assert 'gpubus_webhook_bad_requests_total{kind="bad_encoding"} 1.0' in text
    assert 'result="errored"' not in text
    assert errors_logged(caplog) == []


async def test_an_identity_encoded_body_is_reviewed(ca: trustme.CA, cert_files: tuple[Path, Path]) -> None:
    plain = json.dumps(review(gpu_pod())).encode()
    async with serving(cert_files) as webhook, client(ca) as session:
        status, answer = await post(session, webhook, plain, headers={"Content-Encoding": "identity"})
    assert status == 200 and answer["response"]["uid"] == UID and answer["response"]["allowed"] is True


@pytest.mark.parametrize(
    ("resource", "value"),
    [
        ("nvidia.com/priority", "1e5000"),
        ("nvidia.com/gpumem-percentage", "1e5000"),
        ("nvidia.com/gpu", "1e10000000"),
        ("nvidia.com/priority", "99999999999999999999"),
        ("nvidia.com/gpucores", "\u0665\u0660"),
    ],
)
async def test_unusable_quantities_are_denied_naming_container_and_resource_not_errored(
    ca: trustme.CA,
    cert_files: tuple[Path, Path],
    caplog: pytest.LogCaptureFixture,
    resource: str,
    value: str,
) -> None:
    async with serving(cert_files) as webhook, client(ca) as session:
        status, answer = await post(session, webhook, review(gpu_pod(**{resource: value})))
        text = await metrics_text(session, webhook)
    response = answer["response"]
    assert status == 200 and response["uid"] == UID and response["allowed"] is False
    assert response["status"]["code"] == 400
    assert "'main'" in response["status"]["message"] and resource in response["status"]["message"]
    assert 'gpubus_webhook_decisions_total{outcome="InvalidQuantity"} 1.0' in text
    assert errors_logged(caplog) == []


async def test_health_readiness_and_metrics(ca: trustme.CA, cert_files: tuple[Path, Path]) -> None:
    async with serving(cert_files) as webhook, client(ca) as session:
        base = f"https://localhost:{webhook.port}"
        async with session.get(f"{base}/healthz") as resp:
            assert resp.status == 200
        async with session.get(f"{base}/readyz") as resp:
            assert resp.status == 200 and (await resp.json())["bus"] == "connecting"
        await post(session, webhook, review(gpu_pod()))
        text = await metrics_text(session, webhook)
    for name in (
        "gpubus_webhook_requests_total",
        "gpubus_webhook_request_duration_seconds_bucket",
        "gpubus_webhook_bus_outbox_dropped_total",
        "gpubus_webhook_quota_read_errors_total",
        "gpubus_bus_published_total",  # the bus's own counters, zero while it connects
        "gpubus_bus_refused_total",
    ):
        assert name in text


async def test_admission_answers_while_nats_is_down_and_events_follow_when_it_is_up(
    ca: trustme.CA, cert_files: tuple[Path, Path], tmp_path: Path
) -> None:
    nats = NatsServerProcess(tmp_path / "nats")
    settings = BusSettings(url=nats.url, reconnect_wait_s=0.1)
    try:
        async with serving(cert_files, settings) as webhook, client(ca) as session:
            status, body = await post(session, webhook, review(gpu_pod("early")))
            assert status == 200 and body["response"]["allowed"] is True
            nats.start()
            await wait_until(lambda: webhook.bus.connected, what="the webhook to reach NATS")
            seen = await collect_events(settings, want=1)
    finally:
        nats.stop()
    assert [(type(e), e.name) for e in seen] == [(PodAdmitted, "early")]  # type: ignore[attr-defined]


async def test_admissions_and_rejections_are_published(
    ca: trustme.CA, cert_files: tuple[Path, Path], nats_url: str
) -> None:
    settings = BusSettings(url=nats_url, reconnect_wait_s=0.1)
    denied = gpu_pod("priv")
    denied["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    async with serving(cert_files, settings) as webhook, client(ca) as session:
        await wait_until(lambda: webhook.bus.connected, what="the webhook to reach NATS")
        await post(session, webhook, review(gpu_pod("ok", **{"nvidia.com/gpumem": 2000})))
        await post(session, webhook, review(denied))
        events = await collect_events(settings, want=2, names={"ok", "priv"})
    admitted = next(e for e in events if isinstance(e, PodAdmitted))
    rejected = next(e for e in events if isinstance(e, PodRejected))
    assert (admitted.namespace, admitted.scheduler_name, admitted.source) == (
        "team-a",
        "gpubus-scheduler",
        "webhook",
    )
    assert admitted.requests[0] is not None and admitted.requests[0].memreq == 2000
    assert (rejected.name, rejected.reason) == ("priv", "container main is privileged")


async def collect_events(settings: BusSettings, want: int, names: set[str] | None = None) -> list[Event]:
    """Replay ``gpubus.pod.>`` from the stream until ``want`` matching events arrived."""
    seen: list[Event] = []

    async def handler(event: Event) -> None:
        if names is None or getattr(event, "name", None) in names:
            seen.append(event)

    bus = await Bus.connect(settings, source="test")
    try:
        sub = await bus.subscribe("gpubus.pod.>", handler, deliver="all")
        await wait_until(lambda: len(seen) >= want, what=f"{want} pod events")
        await sub.stop()
    finally:
        await bus.close()
    return seen
