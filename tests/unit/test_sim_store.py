"""The simulated API server's store: a write is stored and announced to every watcher, or neither.

Cases: an object that cannot be serialised is not stored (rv unchanged, nothing announced); a
watcher whose selector cannot read an object is closed (its client re-watches) while the others
still get the event. The HTTP layer refuses such objects first; these hold the store's own line.
"""

from __future__ import annotations

from typing import Any

import pytest

from services.sim.store import Store


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
