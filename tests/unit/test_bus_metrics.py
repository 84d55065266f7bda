"""The bus counters on /metrics: every ``BusStats`` field is a counter ``gpubus_bus_<field>_total``
with help text, read at scrape time, zero before the bus is connected."""

from __future__ import annotations

import dataclasses

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from shared.bus import BusStats
from shared.bus.metrics import HELP, BusStatsCollector

FIELDS = [f.name for f in dataclasses.fields(BusStats)]


def scrape(registry: CollectorRegistry) -> dict[str, tuple[str, str, float]]:
    """family name -> (type, help, value of its ``_total`` sample)."""
    families = text_string_to_metric_families(generate_latest(registry).decode())
    return {f.name: (f.type, f.documentation, next(s.value for s in f.samples if s.name.endswith("_total")))
            for f in families}


def test_every_counter_has_its_own_help_text() -> None:
    assert sorted(HELP) == sorted(FIELDS)


def test_each_counter_is_exported_with_its_current_value() -> None:
    stats = BusStats()
    registry = CollectorRegistry()
    registry.register(BusStatsCollector(lambda: stats))
    stats.decode_errors = 3
    stats.refused = 1
    got = scrape(registry)
    assert sorted(got) == sorted(f"gpubus_bus_{name}" for name in FIELDS)
    assert got["gpubus_bus_decode_errors"] == ("counter", HELP["decode_errors"], 3.0)
    assert got["gpubus_bus_refused"][2] == 1.0
    stats.decode_errors += 1
    assert scrape(registry)["gpubus_bus_decode_errors"][2] == 4.0


def test_before_the_bus_is_connected_every_counter_is_zero() -> None:
    registry = CollectorRegistry()
    registry.register(BusStatsCollector(lambda: None))
    assert {value for _, _, value in scrape(registry).values()} == {0.0}
    assert len(scrape(registry)) == len(FIELDS)


def test_registering_names_the_counters_without_reading_the_stats() -> None:
    def not_yet() -> BusStats:
        raise AssertionError("read at register time")

    registry = CollectorRegistry()
    registry.register(BusStatsCollector(not_yet))
    with pytest.raises(ValueError, match="Duplicated"):
        registry.register(BusStatsCollector(not_yet))
