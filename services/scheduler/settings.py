"""Settings of ``gpubus scheduler`` (CLI > env ``GPUBUS_SCHEDULER_*`` > file), one field per knob.

Loaded once by the composition root and passed down; nothing else reads the environment.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.resource_settings import ResourceNameSettings


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerSettings(ResourceNameSettings):
    """How the extender listens, decides and coordinates with its peers (and the resource names)."""

    bind: str = "0.0.0.0"
    """Address the extender HTTP server listens on."""
    port: int = 8080
    """Port of ``/filter``, ``/prioritize``, ``/bind``, ``/healthz``, ``/readyz``, ``/metrics``."""
    tls_cert: str = ""
    """PEM certificate (chain) the extender serves HTTPS with (kube-scheduler's ``enableHTTPS``);
    empty serves plain HTTP, for a kube-scheduler in the same pod calling over loopback."""
    tls_key: str = ""
    """PEM private key of ``tls_cert``."""
    tls_client_ca: str = ""
    """PEM CA bundle: when set, only clients presenting a certificate it signed are served
    (kube-scheduler's ``tlsConfig.certFile``/``keyFile``)."""
    scheduler_name: str = "gpubus-scheduler"
    """Pods with this ``spec.schedulerName`` are tracked for release ("" = all pods); pods carrying
    HAMi's ``vgpu-devices-allocated`` annotation are tracked (and adopted) whatever their scheduler."""
    node_scheduler_policy: str = "binpack"
    """Default node policy (``binpack`` fuller nodes first, ``spread`` emptier first); pods override it."""
    gpu_scheduler_policy: str = "spread"
    """Default GPU policy (``spread``, ``binpack``, ``numa``, ``mutex``, ``topology-aware``)."""
    single_node_filter: bool = False
    """HAMi mode: filter returns only the single best node instead of every fitting node."""
    lease_ttl_s: float = 30.0
    """Seconds; a new leader replays node-agent verdicts from twice this long ago (it was the TTL of
    the Allocate leases, which the leader's ledger and fenced decisions replaced: issue 32)."""
    bind_timeout_s: float = 25.0
    """Longest a bind waits for its Allocate handoff slots, seconds; keep below the extender
    ``httpTimeout``."""
    forward_timeout_s: float = 28.0
    """How long a standby waits for the leader to answer a forwarded /bind, seconds; keep above
    ``bind_timeout_s`` and below the extender ``httpTimeout`` (30 s in the chart)."""
    reservation_ttl_s: float = 60.0
    """An in-process decision not written to the ledger within this lapses, seconds."""
    provisional_ttl_s: float = 10.0
    """How long the slice /filter holds for a pod waits for its /bind, seconds (0: filter holds none)."""
    preemption: bool = True
    """Evict lower-priority pods to make card room for a pending pod of higher priority (the leader;
    see :mod:`services.scheduler.preemptor`)."""
    preemption_hold_s: float = 120.0
    """How long the room preemption freed is held for its pod (victims' graceful termination
    included) before other pods may take it, seconds."""
    leader_key: str = "leader.scheduler"
    """Key of the leader lease in the ``locks`` bucket."""
    leader_ttl_s: float = 6.0
    """Leader lease TTL, seconds (whole); a standby takes over within about this after a crash."""
    replica_id: str = ""
    """This replica's identity in the leader lease (default: host name and process id)."""
    legacy_metrics: bool = False
    """Export HAMi's pre-v2.9 scheduler metric names instead of the ``hami_*`` names."""
    kubeconfig: str | None = None
    """Path of a kubeconfig; None with ``in_cluster`` False means no Kubernetes API (bus-only mode)."""
    in_cluster: bool = False
    """Use the pod's service account (in-cluster config)."""
    label_pods: bool = True
    """Also set the label ``hami.io/vgpu-node`` (HAMi's monitor selects pods by it); it is written
    with the ``hami.io/bind-phase`` verdict patch, once the node-agent has run Allocate."""
    dra_driver: str = ""
    """DRA mode (or node pools in it): the leader follows the ResourceClaims of this driver that
    kube-scheduler allocates and publishes them as ``allocation.decided``/``released``, so the
    event stream reads as in extender mode. Empty: extender mode only, no claims followed."""
    quota_refresh_s: float = 10.0
    """How often each namespace's ResourceQuotas are re-read, seconds (there is no quota watch)."""
    quota_read_timeout_s: float = 2.0
    """Longest one ResourceQuota read, and a bind's wait for a namespace's first read, seconds."""
    log_level: str = "INFO"
    log_json: bool = False
