"""Which event an admission decision becomes: ``pod.admitted`` for GPU pods, ``pod.rejected`` for denials.

Pure mapping; publishing is the bus link's business. Dry-run reviews and pods that are not
gpubus's produce no event (admission has no side effects for them).
"""

from __future__ import annotations

from services.webhook.admission import AdmissionDecision
from services.webhook.reviews import AdmissionRequest
from shared.events import Event, PodAdmitted, PodRejected


def event_for(decision: AdmissionDecision, request: AdmissionRequest, source: str = "") -> Event | None:
    if request.get("dryRun"):
        return None
    # ``object`` is null in DELETE/CONNECT reviews (a webhook registered for more than CREATE).
    obj = request.get("object")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    namespace = str(request.get("namespace") or meta.get("namespace") or "")
    name = str(request.get("name") or meta.get("name") or meta.get("generateName") or "")
    uid = str(meta.get("uid") or "")
    if not decision.allowed:
        return PodRejected(namespace=namespace, name=name, uid=uid, reason=decision.message, source=source)
    if decision.gpu:
        return PodAdmitted(
            namespace=namespace,
            name=name,
            uid=uid,
            requests=decision.requests,
            mutations=decision.mutations,
            scheduler_name=decision.scheduler_name,
            source=source,
        )
    return None
