"""The documentation: a short README, a docs site that builds in MkDocs' strict mode, no dead links.

Matrix: README length; every relative link and image in README.md and docs/**/*.md names a file
that exists; every page under docs/ is in mkdocs.yml's nav and every nav entry is a page; the
strict build (broken links and anchors are errors there) succeeds.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README_MAX_LINES = 300
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:")


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _relative_links(path: Path) -> list[str]:
    text = _CODE_SPAN.sub("", _FENCE.sub("", path.read_text()))
    return [t for t in _LINK.findall(text) if not _SCHEME.match(t) and not t.startswith("#")]


def _nav_pages(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return []


def test_readme_is_at_most_300_lines() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move details into docs/ and link them")


@pytest.mark.parametrize("path", [ROOT / "README.md", *_pages()], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    dead = [t for t in _relative_links(path) if not (path.parent / t.split("#", 1)[0]).exists()]
    assert not dead, f"{path.relative_to(ROOT)} links to missing files: {dead}"


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    nav = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    pages = [str(p.relative_to(DOCS)) for p in _pages()]
    assert sorted(set(pages) - set(nav)) == [], "pages missing from mkdocs.yml's nav"
    assert sorted(set(nav) - set(pages)) == [], "nav entries without a page under docs/"


def test_the_docs_build_in_strict_mode(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                           cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "index.html").is_file() and (tmp_path / "benchmarks" / "index.html").is_file()
