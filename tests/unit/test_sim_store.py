"""The simulated API server's store: a write is stored and announced to every watcher, or neither.

Cases: an object that cannot be serialised is not stored (rv unchanged, nothing announced); a
watcher whose selector cannot read an object is closed (its client re-watches) while the others
still get the event. The HTTP layer refuses such objects first; these hold the store's own line.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpubus_local.sim.store import Store


def pod(name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", **meta},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


def test_an_object_that_cannot_be_serialised_is_neither_stored_nor_announced() -> None:
    store = Store()
    watcher = store.watch("pods", None, None, None, None)
    deep = pod("deep")
    deep["spec"]["extra"] = nested(300)
    with pytest.raises(TypeError):
        store.create("pods", deep)
    assert store.find("pods", "default", "deep") is None
    assert store.rv == 0 and not watcher.drain() and not watcher.closed
    store.create("pods", pod("fine"))
    assert store.rv == 1 and len(watcher.drain()) == 1


def test_a_watcher_that_cannot_match_a_change_is_closed_and_the_others_still_get_it() -> None:
    store = Store()
    selective = store.watch("pods", None, None, "app=x", None)
    plain = store.watch("pods", None, None, None, None)
    store.create("pods", pod("odd", labels="app=x"))  # refused by the HTTP layer; here it must not split
    assert store.find("pods", "default", "odd") is not None
    assert len(plain.drain()) == 1 and not plain.closed
    assert selective.closed


# --------------------------------------------------------------------------- event expiry


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def event(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}, "reason": "Started"}


def names(store: Store) -> list[str]:
    return [e["metadata"]["name"] for e in store.items("events")]


def test_events_expire_after_their_ttl_each_as_a_deleted_change() -> None:
    clock = Clock()
    store = Store(event_ttl_s=60.0, clock=clock)
    watcher = store.watch("events", None, None, None, None)
    store.create("events", event("a"))
    clock.now = 30.0
    store.create("events", event("b"))
    clock.now = 60.0
    assert names(store) == ["b"]
    assert store.find("events", "default", "a") is None
    assert [line.split(b'"')[3] for line in watcher.drain()] == [b"ADDED", b"ADDED", b"DELETED"]
    clock.now = 90.0
    assert names(store) == []


def test_a_write_renews_an_events_ttl() -> None:
    clock = Clock()
    store = Store(event_ttl_s=60.0, clock=clock)
    store.create("events", event("a"))
    store.create("events", event("b"))
    clock.now = 50.0
    store.update("events", {**store.get("events", "default", "a"), "count": 2})
    clock.now = 70.0
    assert names(store) == ["a"]


def test_past_the_limit_the_least_recently_written_events_go_first() -> None:
    store = Store(event_limit=3)
    for name in "abc":
        store.create("events", event(name))
    store.update("events", {**store.get("events", "default", "a"), "count": 2})
    store.create("events", event("d"))
    assert sorted(names(store)) == ["a", "c", "d"]


def test_a_deleted_event_is_forgotten_by_the_expiry() -> None:
    clock = Clock()
    store = Store(event_ttl_s=60.0, event_limit=2, clock=clock)
    store.create("events", event("a"))
    store.delete("events", "default", "a")
    store.create("events", event("b"))
    store.create("events", event("c"))
    assert sorted(names(store)) == ["b", "c"]
    clock.now = 61.0
    assert names(store) == []
