#!/usr/bin/env python3
"""Draws the house from its imports: each room (the local world, the CLI, each service, shared)
with how many of its modules' imports go to each room below it, and any arrow that goes up.

    .venv/bin/python scripts/import_map.py     the drawing in docs/architecture.md (from the repo root)

The rule itself is import-linter's layers contract in pyproject.toml (``scripts/check``); this only
draws what that contract checks, from the same graph (grimp, import-linter's own).
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import grimp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout, not an installed copy

ROOMS = ("gpubus_local", "gpubus", "services", "shared")
"""Top to bottom: an import may point down this list, never up."""


def room(module: str) -> str:
    """``services.scheduler.fit`` -> ``services.scheduler``; other packages are one room each."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "services" and len(parts) > 1 else parts[0]


def level(name: str) -> int:
    return ROOMS.index(name.split(".", maxsplit=1)[0])


def main() -> int:
    graph = grimp.build_graph(*ROOMS)
    arrows: collections.Counter[tuple[str, str]] = collections.Counter()
    sizes: collections.Counter[str] = collections.Counter()
    for module in graph.modules:
        sizes[room(module)] += 1
        for imported in graph.find_modules_directly_imported_by(module):
            if room(imported) != room(module):
                arrows[room(module), room(imported)] += 1
    up = sorted((a, b) for a, b in arrows if level(a) > level(b) or (level(a) == level(b) and a != b))
    for name in sorted(sizes, key=lambda n: (level(n), n)):
        targets = ", ".join(f"{b} {n}" for (a, b), n in sorted(arrows.items()) if a == name)
        print(f"{name:<22} {sizes[name]:>3} modules  -> {targets or 'nothing of ours'}")
    print(f"upward or sideways arrows: {', '.join(f'{a} -> {b}' for a, b in up) if up else 'none'}")
    return 1 if up else 0


if __name__ == "__main__":
    sys.exit(main())
