"""Pods as a user hands them to ``kubectl``, and what to check in the stored ones.

``pod_yaml`` writes the manifest of a pod with one GPU container ``main`` (label ``a``, optionally
``nvidia.com/gpumem`` and a container ``side``); ``FORBIDDEN`` is the real API server's refusal of a
pod update that changes more than it may; ``directive_keys`` lists the strategic-merge directives
(``$patch``, ``$setElementOrder/...``) left anywhere in an object, which a stored object never has.
"""

from __future__ import annotations

from typing import Any

_POD = """\
apiVersion: v1
kind: Pod
metadata:
  {name}
  labels: {{a: "{label}"}}
spec:
  containers:
  - name: main
    image: {image}
    resources:
      limits: {{{limits}}}
{side}"""
_SIDE = """\
  - name: side
    image: busybox:1
"""

FORBIDDEN = ("spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
             "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
             "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set "
             "to 1 if it was previously negative)")


def pod_yaml(name: str = "x", *, label: str = "1", image: str = "busybox:1", generate: bool = False,
             gpumem: str | None = None, side: bool = False) -> str:
    """A pod ``name`` (a ``generateName`` prefix with ``generate``) whose container ``main`` runs
    ``image`` with one ``nvidia.com/gpu`` (and ``gpumem`` MiB), then a plain ``side`` container."""
    limits = 'nvidia.com/gpu: "1"' + (f', nvidia.com/gpumem: "{gpumem}"' if gpumem is not None else "")
    return _POD.format(name=f"generateName: {name}" if generate else f"name: {name}", label=label,
                       image=image, limits=limits, side=_SIDE if side else "")


def directive_keys(value: Any) -> list[str]:
    """Every key starting with ``$`` in ``value``, at any depth."""
    if isinstance(value, dict):
        own = [k for k in value if k.startswith("$")]
        return own + [d for v in value.values() for d in directive_keys(v)]
    if isinstance(value, list):
        return [d for v in value for d in directive_keys(v)]
    return []
