"""``gpubus explain --pending NAMESPACE/NAME``: the live read for :mod:`.dra_explain` (I/O only).

Reads the pod, the claims it names, every ResourceSlice, every claim (for what is allocated) and
the pod's events from the API server with the given kubeconfig (a reader's rights suffice: get and
list of those), and hands them to the pure core.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from urllib.parse import quote

from services.scheduler import dra_claims, dra_explain
from shared import dra
from shared.errors import BadInput
from shared.kube import KubeClient
from shared.kube_errors import KubeError, NotFound

RESOURCE_API = "/apis/resource.k8s.io/v1"


def run_explain_pending(pending: str, kubeconfig: Path, *, as_json: bool,
                        driver: str = dra.DRIVER) -> tuple[int, str]:
    """Exit code (0: every request has a node with room, 1: some has none) and the text."""
    namespace, _, name = pending.partition("/")
    if not namespace or not name:
        raise BadInput(f"--pending {pending!r}: give NAMESPACE/NAME")
    report = asyncio.run(_read(namespace, name, kubeconfig, driver))
    code = 0 if all(r["allocated"] or r["fitting_nodes"] for r in report["requests"]) else 1
    return code, json.dumps(report) if as_json else dra_explain.render(report)


async def _read(namespace: str, name: str, kubeconfig: Path, driver: str) -> dra_explain.Report:
    kube = await KubeClient.from_kubeconfig(kubeconfig)
    ns = quote(namespace, safe="")
    try:
        try:
            pod = await kube.request("get pod", "GET", f"/api/v1/namespaces/{ns}/pods/{quote(name, safe='')}")
        except NotFound:
            raise BadInput(f"pod {namespace}/{name} not found") from None
        claims = []
        for claim_name in dict.fromkeys(dra_claims.claim_names(pod).values()):
            try:
                path = f"{RESOURCE_API}/namespaces/{ns}/resourceclaims/{quote(claim_name, safe='')}"
                claims.append(await kube.request("get resourceclaim", "GET", path))
            except NotFound:
                continue  # not made from its template yet
        slices = await kube.request("list resourceslices", "GET", f"{RESOURCE_API}/resourceslices")
        every = await kube.request("list resourceclaims", "GET", f"{RESOURCE_API}/resourceclaims")
        selector = quote(f"involvedObject.name={name}", safe="")
        events = await kube.request("list events", "GET",
                                    f"/api/v1/namespaces/{ns}/events?fieldSelector={selector}")
    except KubeError as e:
        raise BadInput(f"cannot read the cluster: {e}") from e
    finally:
        await kube.close()
    return dra_explain.explain_pending(pod, claims, slices.get("items") or [], every.get("items") or [],
                                       events.get("items") or [], driver=driver, device_class=driver)
