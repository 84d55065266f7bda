"""The core/v1 types the simulated API server describes, field by field: the one table behind both
its OpenAPI v3 document (``openapi``) and its server-side field validation (``field_validation``).

A *described* type (``TYPES``) lists every field of the real Kubernetes v1.33 type (a unit test
compares the names with the real schema), each with its type and the first sentence of the real
description. Types are written as ``kubectl explain`` prints them: ``string``, ``int32``, ``int64``,
``boolean``, ``number``, ``Quantity``, ``Time``, ``MicroTime``, ``[]T``, ``map[string]T``, or the short
name of another type. Validation walks into described types (and lists of them) and accepts
everything else as it is: scalars, maps, and the *opaque* types (``OPAQUE``), which the document
names and describes without their fields. A kind without an entry in ``TYPES`` gets a generic
schema: ``apiVersion``, ``kind``, ``metadata`` and any other field. Pure data; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Final

CORE = "io.k8s.api.core.v1."
META = "io.k8s.apimachinery.pkg.apis.meta.v1."

#: Plain values, each with its OpenAPI schema (the document writes it inline) ...
PLAIN_SCALARS: Final = MappingProxyType({
    "string": {"type": "string"}, "int32": {"type": "integer", "format": "int32"},
    "int64": {"type": "integer", "format": "int64"}, "boolean": {"type": "boolean"},
    "number": {"type": "number", "format": "double"},
})
#: ... and apimachinery's values, each with the name of its own component in the OpenAPI document.
NAMED_SCALARS: Final = MappingProxyType({
    "Quantity": "io.k8s.apimachinery.pkg.api.resource.Quantity", "Time": META + "Time",
    "MicroTime": META + "MicroTime",
})
#: Types that are values, not objects: never walked into.
SCALARS: Final = frozenset({*PLAIN_SCALARS, *NAMED_SCALARS})


@dataclass(frozen=True, slots=True)
class Field:
    type: str
    """``string``, ``[]Container``, ``map[string]Quantity``, ``PodSpec``, ... (see the module doc)."""
    doc: str
    patch_strategy: str = ""
    """The ``patchStrategy`` struct tag (``merge``, ``merge,retainKeys``; from ``PATCH_TAGS``): how a
    strategic merge patch merges this list; "" replaces it."""
    merge_key: str = ""
    """The ``patchMergeKey`` struct tag: what identifies an element of a merged list of objects ("" in a
    list of primitives, merged as a set)."""

    @property
    def merges(self) -> bool:
        """Whether a strategic merge patch merges this list with the target's (else replaces it)."""
        return "merge" in self.patch_strategy.split(",")

    @property
    def item(self) -> str:
        """The type of the value, or of each element of a list or map: ``Container`` for ``[]Container``."""
        return element(self.type)[1]


@dataclass(frozen=True, slots=True, kw_only=True)
class TypeDef:
    name: str
    """The OpenAPI component name, as the real server's (``io.k8s.api.core.v1.PodSpec``)."""
    doc: str
    fields: MappingProxyType[str, Field]
    required: tuple[str, ...] = ()
    open: bool = False
    """Fields other than ``fields`` are accepted and kept (the generic schema of an undescribed kind)."""
    kind: str = ""
    """The kind whose top-level object this is (``x-kubernetes-group-version-kind``); "" for parts."""


def _type(name: str, doc: str, fields: dict[str, Field], *, required: tuple[str, ...] = (),
          kind: str = "") -> TypeDef:
    return TypeDef(name=name, doc=doc, fields=MappingProxyType(fields), required=required, kind=kind)


_API_VERSION = Field("string", "APIVersion defines the versioned schema of this representation of an object.")
_KIND = Field("string", "Kind is a string value representing the REST resource this object represents.")
_METADATA = Field("ObjectMeta", "Standard object's metadata.")
F = Field

GPU_RESOURCES = (
    "\n\ngpubus (HAMi-compatible) GPU resources, set in limits (requests count where limits lack them):"
    "\n- nvidia.com/gpu: the number of GPUs (vGPUs, each on a different card)."
    "\n- nvidia.com/gpumem: GPU memory per GPU, in MiB."
    "\n- nvidia.com/gpumem-percentage: GPU memory per GPU as a percentage (0-100) of the card's memory, "
    "instead of gpumem."
    "\n- nvidia.com/gpucores: the percentage (0-100) of each card's compute (SMs) the container may use; 100 "
    "is a whole card."
    "\n- nvidia.com/priority: the task priority that HAMi-core enforces (CUDA_TASK_PRIORITY)."
    "\nMemory or cores without nvidia.com/gpu ask for the default number of GPUs (1). A typo in a field name "
    "(resouces:, limit:) drops the whole request: the API server refuses unknown fields with "
    "fieldValidation=Strict, kubectl's default."
)


def _kind(kind: str, doc: str, *, spec: tuple[str, str], status: tuple[str, str]) -> TypeDef:
    """A kind's top-level type: type meta, metadata, and its spec and status types (type, description)."""
    return _type(CORE + kind, doc, {"apiVersion": _API_VERSION, "kind": _KIND, "metadata": _METADATA,
                                    "spec": Field(*spec), "status": Field(*status)}, kind=kind)


_DESCRIBED = (
    _kind("Pod", "Pod is a collection of containers that can run on a host.",
          spec=("PodSpec", "Specification of the desired behavior of the pod."),
          status=("PodStatus", "Most recently observed status of the pod.")),
    _type(CORE + "PodSpec", "PodSpec is a description of a pod.", {
        "activeDeadlineSeconds": F("int64", "Optional duration in seconds the pod may be active on the node "
                                            "relative to StartTime before the system will actively try to "
                                            "mark it failed and kill associated containers."),
        "affinity": F("Affinity", "If specified, the pod's scheduling constraints."),
        "automountServiceAccountToken": F("boolean", "AutomountServiceAccountToken indicates whether a "
                                                     "service account token should be automatically "
                                                     "mounted."),
        "containers": F("[]Container", "List of containers belonging to the pod. There must be at least one "
                                       "container in a Pod."),
        "dnsConfig": F("PodDNSConfig", "Specifies the DNS parameters of a pod."),
        "dnsPolicy": F("string", "Set DNS policy for the pod."),
        "enableServiceLinks": F("boolean", "EnableServiceLinks indicates whether information about services "
                                           "should be injected into pod's environment variables."),
        "ephemeralContainers": F("[]EphemeralContainer", "List of ephemeral containers run in this pod."),
        "hostAliases": F("[]HostAlias", "HostAliases is an optional list of hosts and IPs that will be "
                                        "injected into the pod's hosts file if specified."),
        "hostIPC": F("boolean", "Use the host's ipc namespace."),
        "hostNetwork": F("boolean", "Host networking requested for this pod."),
        "hostPID": F("boolean", "Use the host's pid namespace."),
        "hostUsers": F("boolean", "Use the host's user namespace."),
        "hostname": F("string", "Specifies the hostname of the Pod."),
        "imagePullSecrets": F("[]LocalObjectReference", "ImagePullSecrets is an optional list of references "
                                                        "to secrets in the same namespace to use for "
                                                        "pulling any of the images."),
        "initContainers": F("[]Container", "List of initialization containers belonging to the pod."),
        "nodeName": F("string", "NodeName indicates in which node this pod is scheduled."),
        "nodeSelector": F("map[string]string", "NodeSelector is a selector which must be true for the pod "
                                               "to fit on a node."),
        "os": F("PodOS", "Specifies the OS of the containers in the pod."),
        "overhead": F("map[string]Quantity", "Overhead represents the resource overhead associated with "
                                             "running a pod for a given RuntimeClass."),
        "preemptionPolicy": F("string", "PreemptionPolicy is the Policy for preempting pods with lower "
                                        "priority."),
        "priority": F("int32", "The priority value."),
        "priorityClassName": F("string", "If specified, indicates the pod's priority."),
        "readinessGates": F("[]PodReadinessGate", "If specified, all readiness gates will be evaluated for "
                                                  "pod readiness."),
        "resourceClaims": F("[]PodResourceClaim", "ResourceClaims defines which ResourceClaims must be "
                                                  "allocated and reserved before the Pod is allowed to "
                                                  "start."),
        "resources": F("ResourceRequirements", "Resources is the total amount of CPU and Memory resources "
                                               "required by all containers in the pod."),
        "restartPolicy": F("string", "Restart policy for all containers within the pod."),
        "runtimeClassName": F("string", "RuntimeClassName refers to a RuntimeClass object in the "
                                        "node.k8s.io group, which should be used to run this pod."),
        "schedulerName": F("string", "If specified, the pod will be dispatched by specified scheduler."),
        "schedulingGates": F("[]PodSchedulingGate", "SchedulingGates is an opaque list of values that if "
                                                    "specified will block scheduling the pod."),
        "securityContext": F("PodSecurityContext", "SecurityContext holds pod-level security attributes and "
                                                   "common container settings."),
        "serviceAccount": F("string", "DeprecatedServiceAccount is a deprecated alias for "
                                      "ServiceAccountName."),
        "serviceAccountName": F("string", "ServiceAccountName is the name of the ServiceAccount to use to "
                                          "run this pod."),
        "setHostnameAsFQDN": F("boolean", "If true the pod's hostname will be configured as the pod's FQDN, "
                                          "rather than the leaf name (the default)."),
        "shareProcessNamespace": F("boolean", "Share a single process namespace between all of the "
                                              "containers in a pod."),
        "subdomain": F("string", "If specified, the fully qualified Pod hostname will be "
                                 "<hostname>.<subdomain>.<pod namespace>.svc.<cluster domain>."),
        "terminationGracePeriodSeconds": F("int64", "Optional duration in seconds the pod needs to "
                                                    "terminate gracefully."),
        "tolerations": F("[]Toleration", "If specified, the pod's tolerations."),
        "topologySpreadConstraints": F("[]TopologySpreadConstraint", "TopologySpreadConstraints describes "
                                                                     "how a group of pods ought to spread "
                                                                     "across topology domains."),
        "volumes": F("[]Volume", "List of volumes that can be mounted by containers belonging to the pod."),
    }, required=("containers",)),
    _type(CORE + "PodStatus", "PodStatus represents information about the status of a pod.", {
        "conditions": F("[]PodCondition", "Current service state of pod."),
        "containerStatuses": F("[]ContainerStatus", "Statuses of containers in this pod."),
        "ephemeralContainerStatuses": F("[]ContainerStatus", "Statuses for any ephemeral containers that "
                                                             "have run in this pod."),
        "hostIP": F("string", "hostIP holds the IP address of the host to which the pod is assigned."),
        "hostIPs": F("[]HostIP", "hostIPs holds the IP addresses allocated to the host."),
        "initContainerStatuses": F("[]ContainerStatus", "Statuses of init containers in this pod."),
        "message": F("string", "A human readable message indicating details about why the pod is in this "
                               "condition."),
        "nominatedNodeName": F("string", "nominatedNodeName is set only when this pod preempts other pods "
                                         "on the node, but it cannot be scheduled right away."),
        "observedGeneration": F("int64", "If set, this represents the .metadata.generation that the pod "
                                         "status was set based upon."),
        "phase": F("string", "The phase of a Pod is a simple, high-level summary of where the Pod is in its "
                             "lifecycle: Pending, Running, Succeeded, Failed or Unknown."),
        "podIP": F("string", "podIP address allocated to the pod."),
        "podIPs": F("[]PodIP", "podIPs holds the IP addresses allocated to the pod."),
        "qosClass": F("string", "The Quality of Service (QOS) classification assigned to the pod based on "
                                "resource requirements."),
        "reason": F("string", "A brief CamelCase message indicating details about why the pod is in this "
                              "state."),
        "resize": F("string", "Status of resources resize desired for pod's containers."),
        "resourceClaimStatuses": F("[]PodResourceClaimStatus", "Status of resource claims."),
        "startTime": F("Time", "RFC 3339 date and time at which the object was acknowledged by the Kubelet."),
    }),
    _type(CORE + "Container", "A single application container that you want to run within a pod.", {
        "args": F("[]string", "Arguments to the entrypoint."),
        "command": F("[]string", "Entrypoint array."),
        "env": F("[]EnvVar", "List of environment variables to set in the container."),
        "envFrom": F("[]EnvFromSource", "List of sources to populate environment variables in the "
                                        "container."),
        "image": F("string", "Container image name."),
        "imagePullPolicy": F("string", "Image pull policy."),
        "lifecycle": F("Lifecycle", "Actions that the management system should take in response to "
                                    "container lifecycle events."),
        "livenessProbe": F("Probe", "Periodic probe of container liveness."),
        "name": F("string", "Name of the container specified as a DNS_LABEL."),
        "ports": F("[]ContainerPort", "List of ports to expose from the container."),
        "readinessProbe": F("Probe", "Periodic probe of container service readiness."),
        "resizePolicy": F("[]ContainerResizePolicy", "Resources resize policy for the container."),
        "resources": F("ResourceRequirements", "Compute Resources required by this container, GPUs "
                                               "included: see resources.limits."),
        "restartPolicy": F("string", "RestartPolicy defines the restart behavior of individual containers "
                                     "in a pod."),
        "securityContext": F("SecurityContext", "SecurityContext defines the security options the container "
                                                "should be run with."),
        "startupProbe": F("Probe", "StartupProbe indicates that the Pod has successfully initialized."),
        "stdin": F("boolean", "Whether this container should allocate a buffer for stdin in the container "
                              "runtime."),
        "stdinOnce": F("boolean", "Whether the container runtime should close the stdin channel after it "
                                  "has been opened by a single attach."),
        "terminationMessagePath": F("string", "Optional: Path at which the file to which the container's "
                                              "termination message will be written is mounted into the "
                                              "container's filesystem."),
        "terminationMessagePolicy": F("string", "Indicate how the termination message should be populated."),
        "tty": F("boolean", "Whether this container should allocate a TTY for itself, also requires 'stdin' "
                            "to be true."),
        "volumeDevices": F("[]VolumeDevice", "volumeDevices is the list of block devices to be used by the "
                                             "container."),
        "volumeMounts": F("[]VolumeMount", "Pod volumes to mount into the container's filesystem."),
        "workingDir": F("string", "Container's working directory."),
    }, required=("name",)),
    _type(CORE + "ResourceRequirements", "ResourceRequirements describes the compute resource "
          "requirements.", {
        "claims": F("[]ResourceClaim", "Claims lists the names of resources, defined in "
                                       "spec.resourceClaims, that are used by this container."),
        "limits": F("map[string]Quantity", "Limits describes the maximum amount of compute "
                                           "resources allowed." + GPU_RESOURCES),
        "requests": F("map[string]Quantity", "Requests describes the minimum amount of compute resources "
                                             "required. If Requests is omitted for a container, it defaults "
                                             "to Limits if that is explicitly specified. For GPUs see "
                                             "limits."),
    }),
    _type(META + "ObjectMeta", "ObjectMeta is metadata that all persisted resources must have, which "
          "includes all objects users must create.", {
        "annotations": F("map[string]string", "Annotations is an unstructured key value map stored with a "
                                              "resource that may be set by external tools to store and "
                                              "retrieve arbitrary metadata. gpubus reads HAMi's pod "
                                              "annotations (nvidia.com/use-gputype, "
                                              "nvidia.com/nouse-gputype, nvidia.com/use-gpuuuid, "
                                              "nvidia.com/nouse-gpuuuid, nvidia.com/numa-bind, "
                                              "hami.io/gpu-scheduler-policy, ...)."),
        "creationTimestamp": F("Time", "CreationTimestamp is a timestamp representing the server time when "
                                       "this object was created."),
        "deletionGracePeriodSeconds": F("int64", "Number of seconds allowed for this object to gracefully "
                                                 "terminate before it will be removed from the system."),
        "deletionTimestamp": F("Time", "DeletionTimestamp is RFC 3339 date and time at which this resource "
                                       "will be deleted."),
        "finalizers": F("[]string", "Must be empty before the object is deleted from the registry."),
        "generateName": F("string", "GenerateName is an optional prefix, used by the server, to generate a "
                                    "unique name ONLY IF the Name field has not been provided."),
        "generation": F("int64", "A sequence number representing a specific generation of the desired "
                                 "state."),
        "labels": F("map[string]string", "Map of string keys and values that can be used to organize and "
                                         "categorize (scope and select) objects."),
        "managedFields": F("[]ManagedFieldsEntry", "ManagedFields maps workflow-id and version to the set "
                                                   "of fields that are managed by that workflow."),
        "name": F("string", "Name must be unique within a namespace."),
        "namespace": F("string", "Namespace defines the space within which each name must be unique."),
        "ownerReferences": F("[]OwnerReference", "List of objects depended by this object."),
        "resourceVersion": F("string", "An opaque value that represents the internal version of this object "
                                       "that can be used by clients to determine when objects have changed."),
        "selfLink": F("string", "Deprecated: selfLink is a legacy read-only field that is no longer "
                                "populated by the system."),
        "uid": F("string", "UID is the unique in time and space value for this object."),
    }),
    _kind("Node", "Node is a worker node in Kubernetes.",
          spec=("NodeSpec", "Spec defines the behavior of a node."),
          status=("NodeStatus", "Most recently observed status of the node.")),
    _type(CORE + "NodeSpec", "NodeSpec describes the attributes that a node is created with.", {
        "configSource": F("NodeConfigSource", "Deprecated: Previously used to specify the source of the "
                                              "node's configuration for the DynamicKubeletConfig feature."),
        "externalID": F("string", "Deprecated."),
        "podCIDR": F("string", "PodCIDR represents the pod IP range assigned to the node."),
        "podCIDRs": F("[]string", "podCIDRs represents the IP ranges assigned to the node for usage by Pods "
                                  "on that node."),
        "providerID": F("string", "ID of the node assigned by the cloud provider in the format: "
                                  "<ProviderName>://<ProviderSpecificNodeID>"),
        "taints": F("[]Taint", "If specified, the node's taints."),
        "unschedulable": F("boolean", "Unschedulable controls node schedulability of new pods."),
    }),
    _type(CORE + "NodeStatus", "NodeStatus is information about the current status of a node.", {
        "addresses": F("[]NodeAddress", "List of addresses reachable to the node."),
        "allocatable": F("map[string]Quantity", "Allocatable represents the resources of a node that are "
                                                "available for scheduling. With gpubus, nvidia.com/gpu is "
                                                "the node's GPUs times the device split count (10 by "
                                                "default)."),
        "capacity": F("map[string]Quantity", "Capacity represents the total resources of a node."),
        "conditions": F("[]NodeCondition", "Conditions is an array of current observed node conditions."),
        "config": F("NodeConfigStatus", "Status of the config assigned to the node via the dynamic Kubelet "
                                        "config feature."),
        "daemonEndpoints": F("NodeDaemonEndpoints", "Endpoints of daemons running on the Node."),
        "features": F("NodeFeatures", "Features describes the set of features implemented by the CRI "
                                      "implementation."),
        "images": F("[]ContainerImage", "List of container images on this node"),
        "nodeInfo": F("NodeSystemInfo", "Set of ids/uuids to uniquely identify the node."),
        "phase": F("string", "NodePhase is the recently observed lifecycle phase of the node."),
        "runtimeHandlers": F("[]NodeRuntimeHandler", "The available runtime handlers."),
        "volumesAttached": F("[]AttachedVolume", "List of volumes that are attached to the node."),
        "volumesInUse": F("[]string", "List of attachable volumes in use (mounted) by the node."),
    }),
    _kind("Namespace", "Namespace provides a scope for Names.",
          spec=("NamespaceSpec", "Spec defines the behavior of the Namespace."),
          status=("NamespaceStatus", "Status describes the current status of a Namespace.")),
    _type(CORE + "NamespaceSpec", "NamespaceSpec describes the attributes on a Namespace.", {
        "finalizers": F("[]string", "Finalizers is an opaque list of values that must be empty to "
                                    "permanently remove object from storage."),
    }),
    _type(CORE + "NamespaceStatus", "NamespaceStatus is information about the current status of a "
          "Namespace.", {
        "conditions": F("[]NamespaceCondition", "Represents the latest available observations of a "
                                                "namespace's current state."),
        "phase": F("string", "Phase is the current lifecycle phase of the namespace."),
    }),
    _kind("ResourceQuota", "ResourceQuota sets aggregate quota restrictions enforced per namespace.",
          spec=("ResourceQuotaSpec", "Spec defines the desired quota."),
          status=("ResourceQuotaStatus", "Status defines the actual enforced quota and its current usage.")),
    _type(CORE + "ResourceQuotaSpec", "ResourceQuotaSpec defines the desired hard limits to enforce for "
          "Quota.", {
        "hard": F("map[string]Quantity", "hard is the set of desired hard limits for each named resource. "
                                         "gpubus (HAMi-style) GPU quotas: limits.nvidia.com/gpumem (MiB) "
                                         "and limits.nvidia.com/gpucores (percent), counted per card times "
                                         "cards; 0 blocks GPU pods."),
        "scopeSelector": F("ScopeSelector", "scopeSelector is also a collection of filters like scopes that "
                                            "must match each object tracked by a quota."),
        "scopes": F("[]string", "A collection of filters that must match each object tracked by a quota."),
    }),
    _type(CORE + "ResourceQuotaStatus", "ResourceQuotaStatus defines the enforced hard limits and observed "
          "use.", {
        "hard": F("map[string]Quantity", "Hard is the set of enforced hard limits for each named resource."),
        "used": F("map[string]Quantity", "Used is the current observed total usage of the resource in the "
                                         "namespace."),
    }),
    _type(CORE + "Binding", "Binding ties one object to another; for example, a pod is bound to a node by "
          "a scheduler.", {
        "apiVersion": _API_VERSION,
        "kind": _KIND,
        "metadata": _METADATA,
        "target": F("ObjectReference", "The target object that you want to bind to the standard object."),
    }, required=("target",), kind="Binding"),
    _type(CORE + "Event", "Event is a report of an event somewhere in the cluster.", {
        "action": F("string", "What action was taken/failed regarding to the Regarding object."),
        "apiVersion": _API_VERSION,
        "count": F("int32", "The number of times this event has occurred."),
        "eventTime": F("MicroTime", "Time when this Event was first observed."),
        "firstTimestamp": F("Time", "The time at which the event was first recorded."),
        "involvedObject": F("ObjectReference", "The object that this event is about."),
        "kind": _KIND,
        "lastTimestamp": F("Time", "The time at which the most recent occurrence of this event was "
                                   "recorded."),
        "message": F("string", "A human-readable description of the status of this operation."),
        "metadata": _METADATA,
        "reason": F("string", "This should be a short, machine understandable string that gives the reason "
                              "for the transition into the object's current status."),
        "related": F("ObjectReference", "Optional secondary object for more complex actions."),
        "reportingComponent": F("string", "Name of the controller that emitted this Event."),
        "reportingInstance": F("string", "ID of the controller instance."),
        "series": F("EventSeries", "Data about the Event series this event represents or nil if it's a "
                                   "singleton Event."),
        "source": F("EventSource", "The component reporting this event."),
        "type": F("string", "Type of this event (Normal, Warning), new types could be added in the future."),
    }, required=("metadata", "involvedObject"), kind="Event"),
)

#: The patch struct tags of k8s.io/api/core/v1 on the described types' fields: (type, field) ->
#: (patchStrategy, patchMergeKey). ``merge`` without a key merges a list of primitives as a set.
#: They drive strategic merge patches (``strategic``) and are in the OpenAPI document, as on a real server.
PATCH_TAGS: Final = MappingProxyType({
    ("ObjectMeta", "finalizers"): ("merge", ""),
    ("ObjectMeta", "ownerReferences"): ("merge", "uid"),
    ("PodSpec", "volumes"): ("merge,retainKeys", "name"),
    ("PodSpec", "initContainers"): ("merge", "name"),
    ("PodSpec", "containers"): ("merge", "name"),
    ("PodSpec", "ephemeralContainers"): ("merge", "name"),
    ("PodSpec", "imagePullSecrets"): ("merge", "name"),
    ("PodSpec", "hostAliases"): ("merge", "ip"),
    ("PodSpec", "schedulingGates"): ("merge", "name"),
    ("PodSpec", "resourceClaims"): ("merge,retainKeys", "name"),
    ("PodSpec", "topologySpreadConstraints"): ("merge", "topologyKey"),
    ("Container", "env"): ("merge", "name"),
    ("Container", "ports"): ("merge", "containerPort"),
    ("Container", "volumeMounts"): ("merge", "mountPath"),
    ("Container", "volumeDevices"): ("merge", "devicePath"),
    ("PodStatus", "conditions"): ("merge", "type"),
    ("PodStatus", "podIPs"): ("merge", "ip"),
    ("PodStatus", "hostIPs"): ("merge", "ip"),
    ("PodStatus", "resourceClaimStatuses"): ("merge,retainKeys", "name"),
    ("NodeSpec", "podCIDRs"): ("merge", ""),
    ("NodeStatus", "conditions"): ("merge", "type"),
    ("NodeStatus", "addresses"): ("merge", "type"),
    ("NamespaceStatus", "conditions"): ("merge", "type"),
})


def _tagged(type_: TypeDef) -> TypeDef:
    short = type_.name.rsplit(".", 1)[1]
    fields = {}
    for name, f in type_.fields.items():
        strategy, key = PATCH_TAGS.get((short, name), ("", ""))
        fields[name] = replace(f, patch_strategy=strategy, merge_key=key) if strategy else f
    return replace(type_, fields=MappingProxyType(fields))


#: Described types by short name (``PodSpec``); a kind's top-level type is its kind's name.
TYPES: Final = MappingProxyType({t.name.rsplit(".", 1)[1]: _tagged(t) for t in _DESCRIBED})

#: Opaque types by short name: (component name, description). Their fields are not checked.
OPAQUE: Final = MappingProxyType({name.rsplit(".", 1)[1]: (name, doc) for name, doc in (
    (CORE + "Affinity", "Affinity is a group of affinity scheduling rules."),
    (CORE + "AttachedVolume", "AttachedVolume describes a volume attached to a node."),
    (CORE + "ContainerImage", "Describe a container image."),
    (CORE + "ContainerPort", "ContainerPort represents a network port in a single container."),
    (CORE + "ContainerResizePolicy", "ContainerResizePolicy represents resource resize policy for the "
     "container."),
    (CORE + "ContainerStatus", "ContainerStatus contains details for the current status of this container."),
    (CORE + "EnvFromSource", "EnvFromSource represents the source of a set of ConfigMaps or Secrets."),
    (CORE + "EnvVar", "EnvVar represents an environment variable present in a Container."),
    (CORE + "EphemeralContainer", "An EphemeralContainer is a temporary container that you may add to an "
     "existing Pod for user-initiated activities such as debugging."),
    (CORE + "EventSeries", "EventSeries contain information on series of events."),
    (CORE + "EventSource", "EventSource contains information for an event."),
    (CORE + "HostAlias", "HostAlias holds the mapping between IP and hostnames that will be injected as an "
     "entry in the pod's hosts file."),
    (CORE + "HostIP", "HostIP represents a single IP address allocated to the host."),
    (CORE + "Lifecycle", "Lifecycle describes actions that the management system should take in response to "
     "container lifecycle events."),
    (CORE + "LocalObjectReference", "LocalObjectReference contains enough information to let you locate the "
     "referenced object inside the same namespace."),
    (CORE + "NamespaceCondition", "NamespaceCondition contains details about state of namespace."),
    (CORE + "NodeAddress", "NodeAddress contains information for the node's address."),
    (CORE + "NodeCondition", "NodeCondition contains condition information for a node."),
    (CORE + "NodeConfigSource", "NodeConfigSource specifies a source of node configuration."),
    (CORE + "NodeConfigStatus", "NodeConfigStatus describes the status of the config assigned by "
     "Node.Spec.ConfigSource."),
    (CORE + "NodeDaemonEndpoints", "NodeDaemonEndpoints lists ports opened by daemons running on the Node."),
    (CORE + "NodeFeatures", "NodeFeatures describes the set of features implemented by the CRI "
     "implementation."),
    (CORE + "NodeRuntimeHandler", "NodeRuntimeHandler is a set of runtime handler information."),
    (CORE + "NodeSystemInfo", "NodeSystemInfo is a set of ids/uuids to uniquely identify the node."),
    (CORE + "ObjectReference", "ObjectReference contains enough information to let you inspect or modify "
     "the referred object."),
    (CORE + "PodCondition", "PodCondition contains details for the current condition of this pod."),
    (CORE + "PodDNSConfig", "PodDNSConfig defines the DNS parameters of a pod in addition to those "
     "generated from DNSPolicy."),
    (CORE + "PodIP", "PodIP represents a single IP address allocated to the pod."),
    (CORE + "PodOS", "PodOS defines the OS parameters of a pod."),
    (CORE + "PodReadinessGate", "PodReadinessGate contains the reference to a pod condition."),
    (CORE + "PodResourceClaim", "PodResourceClaim references exactly one ResourceClaim, either directly or "
     "by naming a ResourceClaimTemplate which is then turned into a ResourceClaim for the pod."),
    (CORE + "PodResourceClaimStatus", "PodResourceClaimStatus is stored in the PodStatus for each "
     "PodResourceClaim which references a ResourceClaimTemplate."),
    (CORE + "PodSchedulingGate", "PodSchedulingGate is associated to a Pod to guard its scheduling."),
    (CORE + "PodSecurityContext", "PodSecurityContext holds pod-level security attributes and common "
     "container settings."),
    (CORE + "Probe", "Probe describes a health check to be performed against a container to determine "
     "whether it is alive or ready to receive traffic."),
    (CORE + "ResourceClaim", "ResourceClaim references one entry in PodSpec.ResourceClaims."),
    (CORE + "ScopeSelector", "A scope selector represents the AND of the selectors represented by the "
     "scoped-resource selector requirements."),
    (CORE + "SecurityContext", "SecurityContext holds security configuration that will be applied to a "
     "container."),
    (CORE + "Taint", "The node this Taint is attached to has the effect on any pod that does not tolerate "
     "the Taint."),
    (CORE + "Toleration", "The pod this Toleration is attached to tolerates any taint that matches the "
     "triple <key,value,effect> using the matching operator <operator>."),
    (CORE + "TopologySpreadConstraint", "TopologySpreadConstraint specifies how to spread matching pods "
     "among the given topology."),
    (CORE + "Volume", "Volume represents a named volume in a pod that may be accessed by any container in "
     "the pod."),
    (CORE + "VolumeDevice", "volumeDevice describes a mapping of a raw block device within a container."),
    (CORE + "VolumeMount", "VolumeMount describes a mounting of a Volume within a container."),
    (META + "ManagedFieldsEntry", "ManagedFieldsEntry is a workflow-id, a FieldSet and the group version of "
     "the resource that the fieldset applies to."),
    (META + "OwnerReference", "OwnerReference contains enough information to let you identify an owning "
     "object."),
)})


def kind_type(kind: str) -> TypeDef:
    """The top-level type of ``kind``: its described type, else the generic one (any field, but
    ``metadata`` is an ObjectMeta and is checked as one)."""
    described = TYPES.get(kind)
    if described is not None and described.kind == kind:
        return described
    fields = {"apiVersion": _API_VERSION, "kind": _KIND, "metadata": _METADATA}
    return TypeDef(name=CORE + kind, doc=f"{kind} (described by the simulated API server only as an object).",
                   fields=MappingProxyType(fields), open=True, kind=kind)


def element(type_: str) -> tuple[str, str]:
    """``("list", "Container")`` for ``[]Container``, ``("map", "Quantity")``, ``("", "PodSpec")``."""
    if type_.startswith("[]"):
        return "list", type_[2:]
    if type_.startswith("map[string]"):
        return "map", type_[len("map[string]"):]
    return "", type_

