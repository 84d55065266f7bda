"""Errors of the dashboard, grouped by what the caller should do about them."""

from __future__ import annotations

from shared.errors import BadInput, GpubusError, Retryable


class DashboardError(GpubusError):
    """Base of the dashboard's own errors."""


class NotFound(DashboardError, BadInput):
    """A URL names a node, card, pod or page the view does not hold (HTTP 404)."""


class BadQuery(DashboardError, BadInput):
    """A query parameter cannot be read (a time that is no time, a negative page); HTTP 400."""


class ReplayUnavailable(DashboardError, Retryable):
    """The stream could not be replayed now (NATS away, consumer refused); HTTP 503, try again."""


class BundleMissing(DashboardError):
    """The package was built without its browser bundle (no npm where it was built); HTTP 503 with how
    to build it."""
