"""A recording mutating webhook over real HTTPS (trustme), for the tests of the SimApiServer's webhook
chain (``pytest_plugins = ("webhook_fixtures",)``): it keeps every AdmissionReview it receives and
answers with ``Webhook.answer`` (by default a JSONPatch adding an annotation and replacing
``schedulerName``), or with ``raw_reply`` bytes when set."""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
import trustme
from aiohttp import web

Answer = Callable[[dict[str, Any]], dict[str, Any]]


def patching(ops: list[dict[str, Any]]) -> Answer:
    def answer(request: dict[str, Any]) -> dict[str, Any]:
        return {"uid": request["uid"], "allowed": True, "patchType": "JSONPatch",
                "patch": base64.b64encode(orjson.dumps(ops)).decode()}
    return answer


ADD_ANNOTATION = patching([
    {"op": "add", "path": "/metadata/annotations", "value": {"gpubus.io/admitted": "true"}},
    {"op": "replace", "path": "/spec/schedulerName", "value": "gpubus-scheduler"},
])


@dataclass
class Webhook:
    url: str
    ca_pem: bytes
    answer: Answer = ADD_ANNOTATION
    received: list[dict[str, Any]] = field(default_factory=list)
    raw_reply: bytes | None = None


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def webhook(ca: trustme.CA) -> AsyncIterator[Webhook]:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(ctx)
    hook = Webhook(url="", ca_pem=ca.cert_pem.bytes())

    async def mutate(request: web.Request) -> web.Response:
        review = await request.json()
        hook.received.append(review)
        if hook.raw_reply is not None:
            return web.Response(body=hook.raw_reply, content_type="application/json")
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                  "response": hook.answer(review["request"])})

    app = web.Application()
    app.router.add_post("/mutate", mutate)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    hook.url = f"https://127.0.0.1:{runner.addresses[0][1]}/mutate"
    yield hook
    await runner.cleanup()
