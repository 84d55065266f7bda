"""Node-agent errors, grouped by what the kubelet (or the operator) should do about them.

The gRPC servicer maps these to ``grpc.StatusCode`` in exactly one table (services/node_agent/plugin.py);
``shared.errors.clip`` keeps outside input short wherever an error message or log line repeats it.
"""

from __future__ import annotations

from shared.errors import BadInput, GpubusError, Retryable


class DiscoveryError(GpubusError):
    """GPUs could not be discovered (NVML missing or failing); fatal with --fail-on-init-error."""


class PluginSocketError(GpubusError):
    """A socket of ours the kubelet dials cannot be served (the device plugin's, or DRA mode's plugin
    and registration sockets): its directory missing or read-only, its path too long."""


class SimSpecError(BadInput):
    """A ``--simulate`` device spec does not follow the documented syntax."""


class BadAllocateRequest(BadInput):
    """The kubelet sent an Allocate/GetPreferredAllocation we cannot make sense of (unknown ids, empty)."""


class NoDecision(Retryable):
    """No allocation was decided for this node that fits the call (yet); the kubelet may retry the pod."""


class DecisionMismatch(BadInput):
    """A decision exists but the kubelet's call does not fit it (device count, ambiguity)."""


class AllocateFailed(GpubusError):
    """The decision is fine but the node cannot serve it (e.g. cannot create the cache directory)."""


class AmbiguousDecision(DecisionMismatch):
    """Several pending pods fit the call equally well; refused rather than risking swapped limits."""


