"""Build the Go and TypeScript consumer examples (examples/consumers/) once per source change, and
install the AsyncAPI document's validator (tests/asyncapi/).

The Go binary goes to a cache outside the repo keyed by a digest of its sources (go.mod, go.sum,
*.go); modules come from the Go module proxy into Go's own module cache. The TypeScript example
gets ``npm ci`` (when package-lock.json changed) and ``tsc`` into its ignored node_modules/ and
dist/. A file lock serializes builds between test processes. A missing toolchain skips, saying so.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GO_DIR = ROOT / "examples" / "consumers" / "go"
TS_DIR = ROOT / "examples" / "consumers" / "ts"
SCHEMAS = ROOT / "docs" / "events" / "schemas"
ASYNCAPI_DIR = ROOT / "tests" / "asyncapi"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpubus-tests" / "consumers"
BUILD_TIMEOUT_S = 600


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:20]


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{name}.lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _run(argv: list[str], cwd: Path) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed in {cwd} ({done.returncode}):\n"
                           f"{done.stdout}\n{done.stderr}")


def _need(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not on PATH: the consumer example needs it to build and run")


def go_consumer() -> list[str]:
    """The command that runs the Go consumer (built if its sources changed)."""
    _need("go")
    key = _digest([GO_DIR / "go.mod", GO_DIR / "go.sum", *GO_DIR.glob("*.go")])
    binary = CACHE / f"go-{key}" / "consumer"
    with _locked("go"):
        if not binary.exists():
            binary.parent.mkdir(parents=True, exist_ok=True)
            partial = binary.with_name("consumer.partial")
            _run(["go", "build", "-mod=readonly", "-o", str(partial), "."], GO_DIR)
            partial.rename(binary)
    return [str(binary)]


def ts_consumer() -> list[str]:
    """The command that runs the TypeScript consumer (``npm ci`` and ``tsc`` if needed)."""
    _need("node", "npm")
    lock_key = _digest([TS_DIR / "package-lock.json"])
    key = _digest([TS_DIR / "package.json", TS_DIR / "package-lock.json", TS_DIR / "tsconfig.json",
                   *(TS_DIR / "src").glob("*.ts")])
    built = TS_DIR / "dist" / ".gpubus-built"
    with _locked("ts"):
        _npm_ci(TS_DIR, lock_key)
        if not built.exists() or built.read_text() != key:
            _run(["node", str(TS_DIR / "node_modules" / "typescript" / "bin" / "tsc"), "-p", "."], TS_DIR)
            built.write_text(key)
    return ["node", str(TS_DIR / "dist" / "consumer.js")]


def asyncapi_validator() -> list[str]:
    """The command that validates an AsyncAPI document with the AsyncAPI Initiative's parser."""
    _need("node", "npm")
    with _locked("asyncapi"):
        _npm_ci(ASYNCAPI_DIR, _digest([ASYNCAPI_DIR / "package-lock.json"]))
    return ["node", str(ASYNCAPI_DIR / "validate.mjs")]


def _npm_ci(project: Path, lock_key: str) -> None:
    """``npm ci`` (no install scripts) unless node_modules already holds this lockfile's packages."""
    installed = project / "node_modules" / ".gpubus-installed"
    if installed.exists() and installed.read_text() == lock_key:
        return
    _run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"], project)
    installed.write_text(lock_key)
