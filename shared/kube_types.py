"""The Kubernetes JSON gpubus touches, typed exactly as it is on the wire (camelCase keys).

These are ``TypedDict`` views of plain dicts: every key is optional (``total=False``) because the
API server omits empty fields, and unknown keys pass through untouched. Only the fields some
gpubus component reads or writes are declared. This module knows no client library and no
service; it has no I/O.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

#: Resource quantities as the API server serialises them ("1", "3000", "500m", "16Gi").
Quantities = dict[str, str]


class OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    finalizers: list[str]


class ListMeta(TypedDict, total=False):
    resourceVersion: str
    # ``continue`` is a Python keyword; it is read as ``meta.get("continue")``.


class ResourceRequirements(TypedDict, total=False):
    limits: Quantities
    requests: Quantities


class EnvVar(TypedDict, total=False):
    name: str
    value: str


class Container(TypedDict, total=False):
    name: str
    image: str
    command: list[str]
    args: list[str]
    env: list[EnvVar]
    resources: ResourceRequirements


class PodSpec(TypedDict, total=False):
    containers: list[Container]
    initContainers: list[Container]
    nodeName: str
    nodeSelector: dict[str, str]
    schedulerName: str
    restartPolicy: str
    priority: int
    priorityClassName: str
    serviceAccountName: str
    schedulingGates: list[dict[str, str]]
    tolerations: list[dict[str, Any]]
    affinity: dict[str, Any]
    runtimeClassName: str


class PodCondition(TypedDict, total=False):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str
    lastTransitionTime: str
    lastProbeTime: str


class ContainerStatus(TypedDict, total=False):
    name: str
    ready: bool
    restartCount: int
    image: str
    containerID: str
    state: dict[str, Any]


PodPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"]


class PodStatus(TypedDict, total=False):
    phase: PodPhase
    conditions: list[PodCondition]
    containerStatuses: list[ContainerStatus]
    hostIP: str
    podIP: str
    startTime: str
    reason: str
    message: str
    nominatedNodeName: str
    qosClass: str


class Pod(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus


class NodeAddress(TypedDict, total=False):
    type: str
    address: str


class NodeCondition(TypedDict, total=False):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str
    lastHeartbeatTime: str
    lastTransitionTime: str


class NodeSpec(TypedDict, total=False):
    unschedulable: bool
    taints: list[dict[str, str]]
    podCIDR: str
    providerID: str


class NodeStatus(TypedDict, total=False):
    capacity: Quantities
    allocatable: Quantities
    conditions: list[NodeCondition]
    addresses: list[NodeAddress]
    nodeInfo: dict[str, str]


class Node(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: NodeSpec
    status: NodeStatus


class Namespace(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    status: dict[str, str]


class ResourceQuotaSpec(TypedDict, total=False):
    hard: Quantities
    scopes: list[str]


class ResourceQuotaStatus(TypedDict, total=False):
    hard: Quantities
    used: Quantities


class ResourceQuota(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: ResourceQuotaSpec
    status: ResourceQuotaStatus


class StatusDetails(TypedDict, total=False):
    name: str
    group: str
    kind: str
    uid: str
    causes: list[dict[str, str]]


class Status(TypedDict, total=False):
    """``metav1.Status``: the body of every API error, and of a successful Binding."""

    apiVersion: str
    kind: Literal["Status"]
    metadata: ListMeta
    status: Literal["Success", "Failure"]
    message: str
    reason: str
    details: StatusDetails
    code: int


class ObjectReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    namespace: str
    uid: str
    resourceVersion: str
    fieldPath: str


class Binding(TypedDict, total=False):
    apiVersion: str
    kind: Literal["Binding"]
    metadata: ObjectMeta
    target: ObjectReference


class EventSource(TypedDict, total=False):
    component: str
    host: str


EventType = Literal["Normal", "Warning"]


class Event(TypedDict, total=False):
    """core/v1 ``Event``: something that happened to ``involvedObject``, as ``kubectl describe`` lists
    it. Repeats of one event are the same object with ``count`` and ``lastTimestamp`` raised."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    involvedObject: ObjectReference
    reason: str
    message: str
    source: EventSource
    firstTimestamp: str
    lastTimestamp: str
    count: int
    type: EventType
    reportingComponent: str
    reportingInstance: str


WatchEventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]


class WatchEvent(TypedDict):
    """One line of a watch stream. ``object`` is a Pod/Node, a bare-metadata BOOKMARK or a Status."""

    type: WatchEventType
    object: dict[str, Any]


class PodWatchEvent(TypedDict):
    """A watch event whose object is known to be a Pod (ADDED, MODIFIED, DELETED)."""

    type: Literal["ADDED", "MODIFIED", "DELETED"]
    object: Pod


class NodeWatchEvent(TypedDict):
    """A watch event whose object is known to be a Node (ADDED, MODIFIED, DELETED)."""

    type: Literal["ADDED", "MODIFIED", "DELETED"]
    object: Node
