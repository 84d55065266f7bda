"""StatsCounters: a dataclass's counters summed over every instance, with a named fallback help text."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from shared.stats_metrics import StatsCounters


@dataclass
class Tally:
    sent: int = 0
    lost: int = 0


def test_counters_are_summed_over_instances_and_an_unnamed_one_gets_the_fallback_help() -> None:
    tallies = [Tally(sent=2, lost=1), Tally(sent=5)]
    registry = CollectorRegistry()
    registry.register(StatsCounters(prefix="x_", kind=Tally, help={"sent": "Things sent"},
                                    fallback="Tally counter", read=lambda: tallies))
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    assert {name: (f.type, f.documentation, f.samples[0].value) for name, f in families.items()} == {
        "x_sent": ("counter", "Things sent", 7.0),
        "x_lost": ("counter", "Tally counter lost", 1.0),
    }
    tallies.clear()  # none left: every series is still there, at zero
    after = text_string_to_metric_families(generate_latest(registry).decode())
    assert [(f.name, f.samples[0].value) for f in after] == [("x_sent", 0.0), ("x_lost", 0.0)]
