"""Errors of the monitor, grouped by what the caller should do about them."""

from __future__ import annotations

from shared.errors import BadInput, GpubusError, Retryable


class MonitorError(GpubusError):
    """Base of the monitor's own errors."""


class RegionError(MonitorError, BadInput):
    """A HAMi-core shared-region file cannot be decoded; ``reason`` says why (a metric label)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class SourceUnavailable(MonitorError, Retryable):
    """A usage source failed as a whole this cycle (NVML gone, hook path unreadable); try next cycle."""


class CgroupError(MonitorError, BadInput):
    """A ``/proc/<pid>/cgroup`` file names no Kubernetes pod."""
