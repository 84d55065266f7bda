"""Settings of ``gpubus dashboard``: one frozen dataclass, CLI > env (``GPUBUS_DASHBOARD_*``) > YAML file.

NATS is configured by :class:`shared.bus.BusSettings` (env ``GPUBUS_BUS_*``), like every other
service; the dashboard only reads from it. Knows nothing about pages or the stream.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.config import SettingsError

ENV_PREFIX = "GPUBUS_DASHBOARD_"


@dataclass(frozen=True, slots=True, kw_only=True)
class DashboardSettings:
    """Everything ``gpubus dashboard`` can be told."""

    bind: str = "127.0.0.1"
    """Address to listen on: loopback unless told otherwise (the pages have no login of their own;
    in the chart a token check or a proxy stands in front, see docs/security.md)."""
    auth: str = "none"
    """``none`` (loopback, or a proxy that authenticates in front) or ``kubernetes``: every page
    needs a bearer token the API server reviews, whose user may ``get`` ``dashboards.gpubus.io``
    in ``auth_namespace`` (services/dashboard/access.py)."""
    auth_namespace: str = "gpubus-system"
    """Namespace of the ``dashboards`` resource checked with ``auth = "kubernetes"``."""
    kubeconfig: str | None = None
    """Kubeconfig for the token reviews (``auth = "kubernetes"``); else ``in_cluster``."""
    in_cluster: bool = False
    """Review tokens with the pod's service account."""
    port: int = 8080
    """HTTP port of the pages, ``/api``, ``/healthz``, ``/readyz`` and ``/metrics``; 0 picks a free one."""
    history_s: float = 900.0
    """At start, events this far back are replayed into the live view and the event feed, seconds."""
    feed_size: int = 5000
    """Events the live feed keeps (newest first on the page)."""
    push_interval_s: float = 0.25
    """Least time between two pushes of a page to one browser, seconds (changes in between coalesce)."""
    checkpoint_interval_s: float = 60.0
    """A copy of the live view is kept this often (stream time); time travel starts from the one before."""
    checkpoints: int = 240
    """Copies kept (240 x 60 s = the last 4 hours); older moments are rebuilt from the stream's start."""
    replay_timeout_s: float = 60.0
    """A time-travel replay taking longer than this fails (HTTP 503), seconds."""
    replay_cache: int = 8
    """Rebuilt views kept for moments asked again (a slider moved back and forth)."""
    pending_forget_s: float = 600.0
    """A Pending pod with no event for this long is no longer shown (deleted before it was placed)."""
    max_streams: int = 500
    """Browsers that may follow live pages at once; more get HTTP 503."""
    finished_retention_s: float = 86_400.0
    """A finished pod (its slices released) stays viewable this long after it ended, seconds (stream time)."""
    trend_step_s: float = 10.0
    """The charts' finest step, seconds of stream time: the cluster's last hour at this step (nodes and
    cards at a minute, day and week ranges at 5 and 30 minutes, or this step where coarser)."""
    idle_after_s: float = 600.0
    """A slice whose pod's SM utilisation stayed under 5% this long is listed as held but idle, seconds."""
    log_level: str = "info"
    log_json: bool = False

    def __post_init__(self) -> None:
        for name in ("push_interval_s", "checkpoint_interval_s", "replay_timeout_s", "trend_step_s"):
            if not getattr(self, name) > 0:
                raise SettingsError(f"{name} must be more than 0")
        for name in ("feed_size", "checkpoints", "replay_cache", "max_streams"):
            if getattr(self, name) < 1:
                raise SettingsError(f"{name} must be at least 1")
        for name in ("history_s", "pending_forget_s", "finished_retention_s", "idle_after_s"):
            if getattr(self, name) < 0:
                raise SettingsError(f"{name} must not be negative")
