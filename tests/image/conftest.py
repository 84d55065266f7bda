"""The image suite runs after every other test: .ci/run builds the images in the background
meanwhile (scripts/image, which the suite then finds done, or waits for on its lock)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("image") is not None)  # stable: order kept otherwise
