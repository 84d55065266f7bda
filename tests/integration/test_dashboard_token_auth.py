"""``gpubus dashboard --auth kubernetes``: every page needs a bearer token the API server reviews
(TokenReview) whose user may ``get`` ``dashboards.gpubus.io`` (SubjectAccessReview).

The reviews are the port's (:class:`services.dashboard.access.Reviewer`), here a fake that answers
as the API server would for three tokens. Case matrix: no header, a non-bearer header, an invalid
token: 401 with WWW-Authenticate; a valid token whose user lacks the permission: 403; a permitted
one: served, reviewed once for two requests (cached by hash); the API server unreachable: 503,
not cached; probes and /metrics open; every verdict counted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest_asyncio

from services.dashboard.access import AccessRule, TokenGate
from services.dashboard.app import Dashboard
from services.dashboard.settings import DashboardSettings
from shared.bus import Bus
from shared.kube_errors import KubeError

USERS = {"alice-token": {"username": "alice", "groups": ["gpu-viewers"]},
         "bob-token": {"username": "bob", "groups": []}}


class FakeApiServer:
    def __init__(self) -> None:
        self.reviews: list[str] = []
        self.down = False

    async def review_token(self, token: str, audiences: list[str]) -> dict[str, Any]:
        if self.down:
            raise KubeError("connection refused")
        self.reviews.append(token)
        user = USERS.get(token)
        return {"authenticated": user is not None, **({"user": user} if user else {})}

    async def review_access(self, user: dict[str, Any], attributes: dict[str, str]) -> bool:
        assert attributes == {"namespace": "gpubus-system", "group": "gpubus.io", "resource": "dashboards",
                              "verb": "get"}
        return "gpu-viewers" in user.get("groups", [])


@pytest_asyncio.fixture
async def served(bus: Bus) -> AsyncIterator[tuple[str, FakeApiServer]]:
    api = FakeApiServer()
    gate = TokenGate(api, AccessRule(namespace="gpubus-system"))
    async with Dashboard(DashboardSettings(bind="127.0.0.1", port=0), bus, gate=gate) as dashboard:
        yield f"http://127.0.0.1:{dashboard.port}", api


async def _status(base: str, path: str, authorization: str | None = None) -> tuple[int, dict[str, str]]:
    headers = {"Authorization": authorization} if authorization else {}
    async with aiohttp.ClientSession() as session, session.get(base + path, headers=headers) as reply:
        return reply.status, dict(reply.headers)


async def test_a_page_needs_a_permitted_kubernetes_token(served: tuple[str, FakeApiServer]) -> None:
    base, api = served
    for authorization in (None, "Basic YWxpY2U6eA==", "Bearer nope"):
        status, headers = await _status(base, "/api/timeline", authorization)
        assert status == 401 and headers["WWW-Authenticate"] == 'Bearer realm="gpubus"', authorization
    assert (await _status(base, "/api/timeline", "Bearer bob-token"))[0] == 403
    for _ in range(2):
        assert (await _status(base, "/api/timeline", "Bearer alice-token"))[0] not in (401, 403, 503)
    assert api.reviews.count("alice-token") == 1  # the second request used the cached verdict
    for path in ("/healthz", "/metrics"):
        assert (await _status(base, path))[0] == 200, path
    async with aiohttp.ClientSession() as session, session.get(base + "/metrics") as reply:
        metrics = await reply.text()
    for verdict, n in (("no_token", 2), ("unauthenticated", 1), ("forbidden", 1), ("allowed", 2)):
        assert f'gpubus_dashboard_access_total{{verdict="{verdict}"}} {n}.0' in metrics, verdict


async def test_an_unreachable_api_server_answers_503_and_is_asked_again(
        served: tuple[str, FakeApiServer]) -> None:
    base, api = served
    api.down = True
    assert (await _status(base, "/api/timeline", "Bearer alice-token"))[0] == 503
    api.down = False
    assert (await _status(base, "/api/timeline", "Bearer alice-token"))[0] not in (401, 403, 503)
