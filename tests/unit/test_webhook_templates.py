"""DRA mode's template writer (services/webhook/templates.py) against a fake API at its seam.

Cases: a missing template is created once and then remembered (until the TTL passes); one that
exists with our digest is used; one that exists with another spec is refused; a refused create
(RBAC) and no API at all refuse the pod with a message naming the template.
"""

from __future__ import annotations

from typing import Any

import pytest

from services.webhook.claims import ClaimSettings, ClaimShape, template
from services.webhook.templates import TemplateFailed, TemplateWriter
from shared.kube_errors import Conflict, KubeError, KubeRejected

TEMPLATE = template(ClaimShape(count=1, memory_mib=3000, cores=30), "team-a", ClaimSettings())
PATH = "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaimtemplates"


class FakeApi:
    """The API server's answers for resourceclaimtemplates: create (409 if present), get."""

    def __init__(self, *, refuse: KubeError | None = None) -> None:
        self.objects: dict[str, Any] = {}
        self.calls: list[tuple[str, str]] = []
        self.refuse = refuse

    async def request(self, what: str, method: str, path: str, body: object = None,
                      content_type: str = "application/json") -> object:
        self.calls.append((method, path))
        if self.refuse is not None:
            raise self.refuse
        if method == "POST":
            assert isinstance(body, dict)
            key = f"{path}/{body['metadata']['name']}"
            if key in self.objects:
                raise Conflict("already exists", code=409)
            self.objects[key] = body
            return body
        return self.objects[path]


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_missing_template_is_created_once_then_remembered() -> None:
    api, clock = FakeApi(), Clock()
    writer = TemplateWriter(api, ttl_s=60, clock=clock)
    assert await writer.ensure([TEMPLATE]) == 1
    assert api.objects[f"{PATH}/gpubus-1x3000mi-30c"] == TEMPLATE.body
    assert await writer.ensure([TEMPLATE, TEMPLATE]) == 0
    assert len(api.calls) == 1
    clock.now = 61
    assert await writer.ensure([TEMPLATE]) == 0  # asked again: it exists, with our digest
    assert [m for m, _ in api.calls] == ["POST", "POST", "GET"]


async def test_a_template_of_that_name_with_another_spec_is_refused() -> None:
    api = FakeApi()
    other = {**TEMPLATE.body, "metadata": {**TEMPLATE.body["metadata"], "annotations": {}}}
    api.objects[f"{PATH}/{TEMPLATE.name}"] = other
    with pytest.raises(TemplateFailed, match="is not the one gpubus would make"):
        await TemplateWriter(api).ensure([TEMPLATE])


async def test_a_refused_create_names_the_template_and_the_reason() -> None:
    api = FakeApi(refuse=KubeRejected('resourceclaimtemplates.resource.k8s.io is forbidden', code=403))
    says = r"could not create ResourceClaimTemplate team-a/gpubus-1x3000mi-30c: .*forbidden"
    with pytest.raises(TemplateFailed, match=says):
        await TemplateWriter(api).ensure([TEMPLATE])


async def test_without_an_api_the_pod_cannot_get_its_template() -> None:
    with pytest.raises(TemplateFailed, match="needs the Kubernetes API"):
        await TemplateWriter(None).ensure([TEMPLATE])
