"""Settings of ``gpubus webhook``: one frozen dataclass, CLI > env (``GPUBUS_WEBHOOK_*``) > YAML file.

:meth:`WebhookSettings.admission` is the part the admission core sees. NATS is configured by
:class:`shared.bus.BusSettings` (env ``GPUBUS_BUS_*``), like every other service.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.webhook.admission import AdmissionSettings, GpuCorePolicy
from services.webhook.claims import ClaimSettings
from shared.resource_settings import ResourceNameSettings

ENV_PREFIX = "GPUBUS_WEBHOOK_"
MODES = ("extender", "dra")
#: Bigger bodies are refused before they are parsed (contract: bodies over 1 MiB get a clear error).
MAX_BODY_BYTES = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookSettings(ResourceNameSettings):
    """Everything ``gpubus webhook`` can be told (the resource names are inherited)."""

    bind: str = "0.0.0.0"
    """Address to listen on."""
    port: int = 8443
    """HTTPS port (the Service maps 443 to it)."""
    cert: str = ""
    """PEM serving certificate (chain); reloaded when the file changes. Empty = plain HTTP (tests only)."""
    key: str = ""
    """PEM private key of ``cert``."""
    client_ca: str = ""
    """PEM CA bundle: when set, only callers presenting a certificate it signed are served, so
    every AdmissionReview (and the ``pod.admitted`` it becomes) is the API server's (give the API
    server a client certificate for this webhook in its AdmissionConfiguration). Empty: anyone
    who reaches the port (the chart's NetworkPolicy narrows that)."""
    cert_check_interval_s: float = 1.0
    """Least time between two checks of the cert/key files for a rotation, seconds."""
    max_body_bytes: int = MAX_BODY_BYTES
    """Largest AdmissionReview accepted, bytes."""
    scheduler_name: str = "gpubus-scheduler"
    """schedulerName written to GPU pods; empty leaves pods' schedulerName alone."""
    force_overwrite_default_scheduler: bool = True
    """Also reroute pods that name ``default-scheduler`` (HAMi's default)."""
    gpu_core_policy: str = "default"
    """``default``, ``force`` or ``disable``; the latter two become ``GPU_CORE_UTILIZATION_POLICY``."""
    overwrite_env: bool = False
    """Give containers without a GPU ``NVIDIA_VISIBLE_DEVICES=none``."""
    runtime_class_name: str = ""
    """runtimeClassName set on GPU pods that name none (empty = leave it)."""
    allow_limiter_env_namespaces: tuple[str, ...] = ()
    """Namespaces whose pods may set the limiter's env vars (comma-separated in env/CLI)."""
    quota_cache_ttl_s: float = 10.0
    """How long a namespace's ResourceQuotas are reused, seconds."""
    kubeconfig: str = ""
    """Kubeconfig for reading ResourceQuotas; with neither this nor ``in_cluster`` quotas are not checked."""
    in_cluster: bool = False
    """Use the pod's service account to reach the API server."""
    mode: str = "extender"
    """``extender``: HAMi's way (GPU pods to ``scheduler_name``, the device plugin hands out slices).
    ``dra``: GPU limits become ResourceClaims of ``dra_device_class`` (templates made per namespace
    and request shape), kube-scheduler allocates them; pod specs stay as they are."""
    dra_device_class: str = "gpubus.io"
    """DRA mode: the DeviceClass claims name (the chart's ``dra.deviceClassName``)."""
    dra_driver: str = "gpubus.io"
    """DRA mode: the driver whose device attributes card selectors read."""
    template_cache_ttl_s: float = 300.0
    """DRA mode: how long a claim template seen is not asked for again, seconds."""
    source: str = "webhook"
    """Stamped on every event as ``source``."""
    log_level: str = "info"
    log_json: bool = False

    def admission(self) -> AdmissionSettings:
        """Raises ValueError for an unknown core policy or mode (checked once, at start-up)."""
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        claims = (ClaimSettings(device_class=self.dra_device_class, driver=self.dra_driver)
                  if self.mode == "dra" else None)
        return AdmissionSettings(
            claims=claims,
            names=self.names(),
            scheduler_name=self.scheduler_name,
            force_overwrite_default_scheduler=self.force_overwrite_default_scheduler,
            gpu_core_policy=GpuCorePolicy(self.gpu_core_policy),
            overwrite_env=self.overwrite_env,
            runtime_class_name=self.runtime_class_name,
            allow_limiter_env_namespaces=frozenset(self.allow_limiter_env_namespaces),
        )
