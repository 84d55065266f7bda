"""Mutating admission as the API server runs it: AdmissionReview v1 over HTTPS to each webhook.

For a pod CREATE the server sends ``{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",
"request":{uid, kind, resource, requestKind, requestResource, name ("" with generateName),
namespace, operation, userInfo, object, oldObject, dryRun, options}}`` to every webhook whose
``namespaceSelector``/``objectSelector`` match, in order, applying each returned base64 JSONPatch
before calling the next. ``allowed: false`` refuses the create with the webhook's status; a call
that fails (transport, timeout, non-200, malformed review, wrong uid, bad patch) refuses it with
500 under ``failurePolicy: Fail`` and is skipped under ``Ignore``. One keep-alive HTTPS session
per webhook; the server's certificate must chain to the configured ``caBundle``. A dry run
(``dryRun=All``) calls them with ``dryRun: true``, and only those whose ``sideEffects`` is ``None``
or ``NoneOnDryRun``: one that matches and may have side effects refuses the dry run with the real
400 ``admission webhook "x" does not support dry run``, whatever its failure policy.
"""

from __future__ import annotations

import base64
import logging
import ssl
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import orjson

from gpubus_local.sim.errors import ApiError, PatchError
from gpubus_local.sim.jsonpatch import apply_json_patch
from gpubus_local.sim.selectors import structured_selector_matches

log = logging.getLogger(__name__)

Obj = dict[str, Any]

#: The HAMi chart's default: namespaces labelled ``hami.io/webhook=ignore`` are never sent.
HAMI_NAMESPACE_SELECTOR: Obj = {
    "matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]
}

_USER = {"username": "system:admin", "uid": "sim-admin", "groups": ["system:masters", "system:authenticated"]}
_POD_KIND = {"group": "", "version": "v1", "kind": "Pod"}
_POD_RESOURCE = {"group": "", "version": "v1", "resource": "pods"}

SideEffects = Literal["None", "NoneOnDryRun", "Some", "Unknown"]
#: The side-effect classes a dry run may call: the webhook promised to change nothing else when told so.
_DRY_RUN_SAFE: frozenset[SideEffects] = frozenset({"None", "NoneOnDryRun"})


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookConfig:
    """One entry of a MutatingWebhookConfiguration (pods, CREATE) as the simulator honours it."""

    name: str
    """Qualified webhook name, used in error messages ("vgpu.hami.io")."""
    url: str
    """``https://host:port/path`` (clientConfig.url; service references are resolved by the caller)."""
    ca_bundle: bytes | None = None
    """PEM CA the serving certificate must chain to; None uses the system trust store."""
    failure_policy: Literal["Fail", "Ignore"] = "Fail"
    timeout_s: float = 10.0
    """timeoutSeconds (1-30 on a real server)."""
    namespace_selector: Obj = field(default_factory=lambda: dict(HAMI_NAMESPACE_SELECTOR))
    object_selector: Obj = field(default_factory=dict)
    side_effects: SideEffects = "None"
    """sideEffects. ``admissionregistration.k8s.io/v1`` requires ``None`` or ``NoneOnDryRun`` (what
    gpubus's and HAMi's charts declare: None); ``Some`` and ``Unknown`` survive only from v1beta1
    configurations, and a real server refuses a dry run that would call such a webhook."""

    @classmethod
    def from_k8s(cls, webhook: Obj, *, url: str | None = None) -> WebhookConfig:
        """From a ``webhooks[]`` entry of a MutatingWebhookConfiguration (``url`` overrides service)."""
        client = webhook.get("clientConfig") or {}
        ca = client.get("caBundle")
        return cls(
            name=webhook["name"],
            url=url or client["url"],
            ca_bundle=base64.b64decode(ca) if ca else None,
            failure_policy=webhook.get("failurePolicy", "Fail"),
            timeout_s=float(webhook.get("timeoutSeconds", 10)),
            namespace_selector=webhook.get("namespaceSelector") or {},
            object_selector=webhook.get("objectSelector") or {},
            # absent only in a v1beta1 entry, whose default was Unknown: never called on a dry run
            side_effects=webhook.get("sideEffects", "Unknown"),
        )


class WebhookCallError(Exception):
    """A webhook call did not produce a usable AdmissionReview response."""


def review_request(obj: Obj, namespace: str, *, dry_run: bool = False) -> Obj:
    options: Obj = {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
    if dry_run:
        options["dryRun"] = ["All"]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": _POD_KIND,
            "resource": _POD_RESOURCE,
            "requestKind": _POD_KIND,
            "requestResource": _POD_RESOURCE,
            "name": obj.get("metadata", {}).get("name", ""),
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": _USER,
            "object": obj,
            "oldObject": None,
            "dryRun": dry_run,
            "options": options,
        },
    }


def check_dry_run(webhook: WebhookConfig) -> None:
    """A dry run may call only a webhook without side effects (the real dispatcher's check: a 400,
    not a call failure, so ``failurePolicy: Ignore`` does not skip it)."""
    if webhook.side_effects not in _DRY_RUN_SAFE:
        raise ApiError.bad_request(f'admission webhook "{webhook.name}" does not support dry run')


def apply_review_response(obj: Obj, review: Obj, request_uid: str, webhook: str) -> Obj:
    """The object after one webhook's answer; raises ApiError (denied) or WebhookCallError."""
    response = review.get("response")
    if review.get("apiVersion") != "admission.k8s.io/v1" or review.get("kind") != "AdmissionReview":
        raise WebhookCallError("expected response.apiVersion admission.k8s.io/v1, kind AdmissionReview")
    if not isinstance(response, dict):
        raise WebhookCallError("webhook response was absent")
    if response.get("uid") != request_uid:
        raise WebhookCallError(f"expected response.uid={request_uid!r}, got {response.get('uid')!r}")
    if not response.get("allowed"):
        status = response.get("status") or {}
        code = int(status.get("code") or 403)
        raise ApiError(code, status.get("reason") or "Forbidden",
                       f'admission webhook "{webhook}" denied the request: {status.get("message", "")}')
    patch = response.get("patch")
    if not patch:
        return obj
    if response.get("patchType") != "JSONPatch":
        raise WebhookCallError(f"unsupported patchType {response.get('patchType')!r}")
    try:
        return dict(apply_json_patch(obj, orjson.loads(base64.b64decode(patch))))
    except (PatchError, ValueError) as e:
        raise WebhookCallError(f"JSON patch could not be applied: {e}") from e


class AdmissionChain:
    """The configured mutating webhooks and their HTTPS sessions."""

    def __init__(self, webhooks: list[WebhookConfig] | None = None) -> None:
        self._webhooks = list(webhooks or [])
        self._sessions: dict[str, aiohttp.ClientSession] = {}

    def add(self, webhook: WebhookConfig) -> None:
        self._webhooks = [w for w in self._webhooks if w.name != webhook.name] + [webhook]
        self._sessions.pop(webhook.name, None)

    def remove(self, name: str) -> None:
        self._webhooks = [w for w in self._webhooks if w.name != name]

    @property
    def webhooks(self) -> list[WebhookConfig]:
        return list(self._webhooks)

    async def close(self) -> None:
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()

    def _session(self, webhook: WebhookConfig) -> aiohttp.ClientSession:
        session = self._sessions.get(webhook.name)
        if session is None:
            ctx = ssl.create_default_context(cadata=webhook.ca_bundle.decode() if webhook.ca_bundle else None)
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=64))
            self._sessions[webhook.name] = session
        return session

    async def admit(self, obj: Obj, namespace: str, namespace_labels: dict[str, str], *,
                    dry_run: bool = False) -> Obj:
        """``obj`` after every matching webhook's patch (the very object when none patched it)."""
        for webhook in self._webhooks:
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if not structured_selector_matches(webhook.namespace_selector, namespace_labels):
                continue
            if not structured_selector_matches(webhook.object_selector, labels):
                continue
            if dry_run:
                check_dry_run(webhook)
            obj = await self._call(webhook, obj, namespace, dry_run)
        return obj

    async def _call(self, webhook: WebhookConfig, obj: Obj, namespace: str, dry_run: bool) -> Obj:
        review = review_request(obj, namespace, dry_run=dry_run)
        try:
            answer = await self._post(webhook, review)
            return apply_review_response(obj, answer, review["request"]["uid"], webhook.name)
        except WebhookCallError as e:
            if webhook.failure_policy == "Ignore":
                log.warning("webhook %s failed, ignored by failurePolicy: %s", webhook.name, e)
                return obj
            raise ApiError.internal(f'failed calling webhook "{webhook.name}": {e}') from e

    async def _post(self, webhook: WebhookConfig, review: Obj) -> Obj:
        session = self._session(webhook)
        try:
            async with session.post(
                webhook.url, data=orjson.dumps(review), headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=webhook.timeout_s),
            ) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise WebhookCallError(f"webhook returned HTTP {resp.status}: {body[:200]!r}")
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            why = f'failed to call webhook: Post "{webhook.url}": {type(e).__name__}: {e}'
            raise WebhookCallError(why) from e
        try:
            answer = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise WebhookCallError(f"webhook response is not JSON: {e}") from e
        if not isinstance(answer, dict):
            raise WebhookCallError("webhook response is not a JSON object")
        return answer
