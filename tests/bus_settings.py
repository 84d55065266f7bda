"""Bus settings for tests: fast reconnects and short waits, over any test's own overrides."""

from __future__ import annotations

from shared.bus import BusSettings


def bus_settings(url: str, **overrides: object) -> BusSettings:
    """Settings tuned for tests: fast reconnects, short waits."""
    values: dict[str, object] = {"url": url, "name": "gpubus-test", "reconnect_wait_s": 0.1,
                                 "initial_connect_timeout_s": 5.0, "request_timeout_s": 2.0,
                                 "flush_timeout_s": 2.0}
    values.update(overrides)
    return BusSettings(**values)  # type: ignore[arg-type]
