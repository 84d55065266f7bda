"""setuptools hook (all metadata lives in pyproject.toml): build the dashboard's browser bundle.

``build_py`` (every wheel, sdist-to-wheel and editable install) first runs ``npm ci && npm run
build`` in ``services/dashboard/web`` when npm is on PATH and the bundle in
``services/dashboard/static/dist`` is missing or older than its sources. Without npm an existing
bundle is packaged as is; with neither, the package builds and the dashboard answers every page
with an error page saying how to build the bundle.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

WEB = Path(__file__).resolve().parent / "services" / "dashboard" / "web"
BUNDLE = WEB.parent / "static" / "dist" / "app.js"


def _stale() -> bool:
    if not BUNDLE.exists():
        return True
    built = BUNDLE.stat().st_mtime
    sources = [WEB / "package.json", WEB / "package-lock.json", *(WEB / "src").rglob("*")]
    return any(p.stat().st_mtime > built for p in sources if p.is_file())


def build_dashboard() -> None:
    npm = shutil.which("npm")
    if not (WEB / "package-lock.json").exists() or not _stale():
        return
    if npm is None:
        if not BUNDLE.exists():
            print("warning: npm not found: the dashboard's bundle (services/dashboard/static/dist) is not "
                  "built and its pages will say so; install Node.js 18+ and build again", file=sys.stderr)
        return
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=WEB, check=True)
    subprocess.run([npm, "run", "build", "--silent"], cwd=WEB, check=True)


class BuildPyWithDashboard(build_py):
    """``build_py`` that builds the dashboard's bundle first."""

    def run(self) -> None:
        build_dashboard()
        super().run()


setup(cmdclass={"build_py": BuildPyWithDashboard})
