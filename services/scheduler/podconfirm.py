"""Whether a pod named in an extender request exists as named, by the API server's word.

/filter's body is a claim: anyone who can reach the extender can send one. Before the scheduler
publishes an event about a pod (``pod.unschedulable``) it confirms the pod: first from the leader's
pod watch, else (a standby, or a pod the watch has not shown yet) with one read of the pod. A
bounded memory of confirmed pods keeps retried filters from reading again. Must not know HTTP.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable

from shared.kube import KubeApi, KubeError

log = logging.getLogger(__name__)

#: Confirmed pods remembered (oldest dropped first).
CONFIRMED_KEPT = 4096


class PodConfirmer:
    """``await confirm(namespace, name, uid)``: True when the API server has that pod."""

    def __init__(self, kube: KubeApi | None, live: Callable[[str], tuple[str, str] | None],
                 size: int = CONFIRMED_KEPT) -> None:
        self._kube = kube
        self._live = live
        self._confirmed: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._size = size

    async def confirm(self, namespace: str, name: str, uid: str) -> bool:
        if not uid:
            return False
        want = (namespace, name)
        if self._live(uid) == want or self._confirmed.get(uid) == want:
            return True
        if self._kube is None:
            return False
        try:
            pod = await self._kube.get_pod(namespace, name)
        except KubeError as e:
            log.info("cannot confirm pod %s/%s: %s", namespace, name, e)
            return False
        if pod is None or (pod.get("metadata") or {}).get("uid") != uid:
            return False
        self._confirmed[uid] = want
        while len(self._confirmed) > self._size:
            self._confirmed.popitem(last=False)
        return True
