"""The container image recipe (deploy/Dockerfile), checked without a Docker engine.

The Dockerfile is parsed for what must hold (a public slim base by default, replaceable; the
production image last, the sim target beside it; non-root users; the ``gpubus`` entry point;
only existing sources copied, the same that scripts/image fingerprints), and the wheels it
installs are built from exactly the files it copies, to prove that the gRPC stubs and every
service ship and that the production wheel holds no simulator. tests/image builds it for real.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helmchart import ROOT

DOCKERFILE = ROOT / "deploy" / "Dockerfile"
IGNOREFILE = ROOT / "deploy" / "Dockerfile.dockerignore"
SCRIPT = ROOT / "scripts" / "image"
SERVICES = ("webhook", "scheduler", "node_agent", "monitor", "dashboard")
#: The dashboard's pages are files of the package: without them the image serves 404s (the bundle in
#: dist/ is built on the host by scripts/bootstrap before an image is made; without it, a 503 page).
DASHBOARD_STATIC = {f"services/dashboard/static/{name}" for name in ("index.html", "app.css", "dist/app.js",
                                                                     "dist/app.css")}
#: Made on the host by scripts/image (`pip wheel`) when the builder cannot reach the index.
HOST_WHEELS = "build/wheelhouse"


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
    """The instructions of each stage, FROM first (global ARGs before the first FROM left out)."""
    stages: list[list[tuple[str, str]]] = []
    for instruction in _instructions():
        if instruction[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def _stage(name: str) -> dict[str, str]:
    """Instruction -> arguments (the last of each kind, RUNs joined) of the stage ``name``."""
    [stage] = [s for s in _stages() if s[0][1].endswith(f" AS {name}")]
    found = dict(stage)
    found["RUN"] = " ".join(args for word, args in stage if word == "RUN")
    return found


def _simulator() -> str:
    """The path the build removes before it makes the production wheel."""
    removed = re.search(r"rm -rf (\S+) build ", _stage("build")["RUN"])
    assert removed is not None, "the build stage removes no simulator before the production wheel"
    return removed.group(1)


def _copied_sources() -> list[str]:
    """Build-context paths the Dockerfile COPYs (not those copied from another stage)."""
    sources: list[str] = []
    for word, args in _instructions():
        if word == "COPY" and "--from" not in args:
            *srcs, _dest = args.split()
            sources.extend(srcs)
    return sources


def test_every_stage_starts_from_the_base_argument_a_public_slim_python_by_default() -> None:
    instructions = _instructions()
    assert ("ARG", "BASE=python:3.11-slim") in instructions[: instructions.index(next(
        i for i in instructions if i[0] == "FROM"))]
    names = {s[0][1].split()[-1] for s in _stages()}
    for stage in _stages():
        image = stage[0][1].split()[0]
        assert image == "${BASE}" or image in names or image == "wheelhouse-${WHEELS}", image


def test_production_is_the_default_image_and_sim_a_target() -> None:
    names = [s[0][1].split()[-1] for s in _stages()]
    assert names[-1] == "production" and "sim" in names
    assert _stage("production")["FROM"] == "runtime AS production"
    assert _stage("sim")["FROM"] == "runtime AS sim"


@pytest.mark.parametrize("target", ["production", "sim"])
def test_each_image_runs_gpubus_as_an_unprivileged_user(target: str) -> None:
    user = _stage(target)["USER"].split(":")[0]
    assert user not in ("0", "root") and int(user) >= 1000
    assert _stage("runtime")["ENTRYPOINT"] == '["gpubus"]'


def test_images_install_without_an_index_and_production_checks_stubs_and_no_simulator() -> None:
    for stage in ("venv-production", "venv-sim", "gpubus-production", "gpubus-sim"):
        run = _stage(stage)["RUN"]
        assert "--no-index" in run and "--no-cache-dir" in run, stage
    run = _stage("production")["RUN"]
    assert "proto.deviceplugin.v1beta1.api_pb2_grpc" in run
    assert f'import {_simulator().replace("/", ".")}' in run and "exit 1" in run
    assert "gpubus --help" in run


def test_scripts_image_fingerprints_exactly_what_the_dockerfile_copies() -> None:
    listed = re.search(r"^sources=\((.*)\)$", SCRIPT.read_text(), re.MULTILINE)
    assert listed is not None
    copied = sorted(s.rstrip("/") for s in _copied_sources() if s != HOST_WHEELS)
    assert sorted(listed.group(1).split()) == copied


@pytest.mark.parametrize("source", _copied_sources())
def test_every_copied_source_exists_and_is_not_ignored(source: str) -> None:
    assert source == HOST_WHEELS or (ROOT / source).exists(), f"COPY {source}: not in the repository"
    patterns = [p.strip() for p in IGNOREFILE.read_text().splitlines() if p.strip() and not p.startswith("#")]
    ignored = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if fnmatch.fnmatch(source.rstrip("/"), pattern.lstrip("!").rstrip("/")):
            ignored = not negated
    assert not ignored, f"COPY {source} is excluded by {IGNOREFILE.name}"


def _wheel(context: Path, wheels: Path) -> set[str]:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--wheel-dir", str(wheels), str(context)],
                   check=True, capture_output=True, timeout=300)
    [wheel] = wheels.glob("gpubus-*.whl")
    return set(zipfile.ZipFile(wheel).namelist())


def test_wheels_built_from_the_copied_files_ship_stubs_and_every_service_and_production_no_simulator(
        tmp_path: Path) -> None:
    # Built offline with this environment's setuptools (pyproject.toml needs >= 77).
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} cannot build pyproject.toml offline (needs >= 77)")
    context = tmp_path / "context"
    for source in (s for s in _copied_sources() if s != HOST_WHEELS):
        origin, target = ROOT / source, context / source
        if origin.is_dir():
            ignored = shutil.ignore_patterns("__pycache__", "*.pyc", "node_modules")  # as the ignore file
            shutil.copytree(origin, target, ignore=ignored)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, target)
    names = _wheel(context, tmp_path / "sim")
    assert any(n.startswith(f"{_simulator()}/") for n in names)
    for stub in ("proto/deviceplugin/v1beta1/api_pb2.py", "proto/deviceplugin/v1beta1/api_pb2_grpc.py",
                 "proto/podresources/v1/api_pb2.py", "proto/podresources/v1/api_pb2_grpc.py"):
        assert stub in names
    for service in SERVICES:
        assert any(n.startswith(f"services/{service}/") for n in names), service
    assert set(names) >= DASHBOARD_STATIC
    assert "gpubus/cli.py" in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    wheel = next((tmp_path / "sim").glob("gpubus-*.whl"))
    assert "gpubus = gpubus.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    shutil.rmtree(context / _simulator())
    shutil.rmtree(context / "build", ignore_errors=True)
    production = _wheel(context, tmp_path / "production")
    simulator = {n for n in names if n.startswith(f"{_simulator()}/")}
    assert {n for n in names ^ production if ".dist-info/" not in n} == simulator  # all else ships
