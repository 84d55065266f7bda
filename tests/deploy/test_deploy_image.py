"""The container image recipe (deploy/Dockerfile), checked without a Docker engine.

The Dockerfile is parsed for what must hold (slim multi-stage build, non-root final user, the
``gpubus`` entry point, only existing sources copied), and the wheel it installs is built from
exactly the files it copies, to prove that the gRPC stubs and every service ship in the image.
"""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helmchart import ROOT

DOCKERFILE = ROOT / "deploy" / "Dockerfile"
IGNOREFILE = ROOT / "deploy" / "Dockerfile.dockerignore"
SERVICES = ("webhook", "scheduler", "node_agent", "monitor", "dashboard")
#: The dashboard's pages are files of the package: without them the image serves 404s.
DASHBOARD_STATIC = {f"services/dashboard/static/{name}" for name in ("index.html", "app.js", "app.css")}


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        logical.append(pending)
        pending = ""
    return [(word.upper(), rest.strip()) for word, _, rest in (line.partition(" ") for line in logical)]


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for instruction in _instructions():
        if instruction[0] == "FROM":
            stages.append([])
        stages[-1].append(instruction)
    return stages


def _copied_sources() -> list[str]:
    """Build-context paths the Dockerfile COPYs (not those copied from another stage)."""
    sources: list[str] = []
    for word, args in _instructions():
        if word == "COPY" and "--from" not in args:
            *srcs, _dest = args.split()
            sources.extend(srcs)
    return sources


def test_image_builds_in_a_slim_stage_and_runs_from_another() -> None:
    stages = _stages()
    assert len(stages) == 2
    assert [s[0][1].split()[0] for s in stages] == ["python:3.11-slim", "python:3.11-slim"]
    assert stages[0][0][1].endswith("AS build")


def test_final_stage_runs_gpubus_as_an_unprivileged_user() -> None:
    final = dict(_stages()[-1])
    user = final["USER"].split(":")[0]
    assert user not in ("0", "root") and int(user) >= 1000
    assert final["ENTRYPOINT"] == '["gpubus"]'


def test_final_stage_installs_wheels_without_an_index_and_checks_the_stubs() -> None:
    run = " ".join(args for word, args in _stages()[-1] if word == "RUN")
    assert "--no-index" in run and "--no-cache-dir" in run
    assert "proto.deviceplugin.v1beta1.api_pb2_grpc" in run
    assert "gpubus --help" in run


@pytest.mark.parametrize("source", _copied_sources())
def test_every_copied_source_exists_and_is_not_ignored(source: str) -> None:
    assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    patterns = [p.strip() for p in IGNOREFILE.read_text().splitlines() if p.strip() and not p.startswith("#")]
    ignored = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if fnmatch.fnmatch(source.rstrip("/"), pattern.lstrip("!").rstrip("/")):
            ignored = not negated
    assert not ignored, f"COPY {source} is excluded by {IGNOREFILE.name}"


def test_wheel_built_from_the_copied_files_ships_stubs_and_every_service(tmp_path: Path) -> None:
    # Built offline with this environment's setuptools (pyproject.toml needs >= 77).
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} cannot build pyproject.toml offline (needs >= 77)")
    context = tmp_path / "context"
    for source in _copied_sources():
        origin, target = ROOT / source, context / source
        if origin.is_dir():
            shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, target)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--wheel-dir", str(wheels), str(context)],
                   check=True, capture_output=True, timeout=300)
    [wheel] = wheels.glob("gpubus-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for stub in ("proto/deviceplugin/v1beta1/api_pb2.py", "proto/deviceplugin/v1beta1/api_pb2_grpc.py",
                 "proto/podresources/v1/api_pb2.py", "proto/podresources/v1/api_pb2_grpc.py"):
        assert stub in names
    for service in SERVICES:
        assert any(n.startswith(f"services/{service}/") for n in names), service
    assert set(names) >= DASHBOARD_STATIC
    assert "gpubus/cli.py" in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "gpubus = gpubus.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
