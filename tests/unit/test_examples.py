"""The example pods can be submitted again and again, and the docs' list names every example.

Case matrix: every Pod in ``examples/`` has a ``generateName`` and no ``name`` (a second submit is
a new pod, not a 409) and loads as ``gpubus submit`` loads it; ``docs/local.md``'s table of
``examples/`` names each file and directory there, and nothing that is not.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gpubus.submit import load_pods

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
POD_FILES = sorted(EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize("path", POD_FILES, ids=[p.name for p in POD_FILES])
def test_every_example_pod_has_a_generated_name(path: Path) -> None:
    [doc] = list(yaml.safe_load_all(path.read_text()))
    meta = doc["metadata"]
    assert "name" not in meta and meta["generateName"].endswith("-"), meta
    [pod] = list(load_pods(path, 1))
    assert pod["metadata"]["generateName"] == meta["generateName"]


def test_the_docs_list_names_every_example_and_nothing_else() -> None:
    text = (ROOT / "docs" / "local.md").read_text()
    table = text.split("\n`examples/` (", 1)[1].split("\n\n", 2)[1]  # the table after the intro
    listed = set(re.findall(r"^\| `([^`]+)` \|", table, flags=re.MULTILINE))
    present = {p.name + ("/" if p.is_dir() else "") for p in EXAMPLES.iterdir()}
    assert POD_FILES and listed == present
