"""The committed gRPC stubs under proto/ are exactly what scripts/gen-proto makes from the .proto files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STUBS = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")
PACKAGES = ("proto/deviceplugin/v1beta1", "proto/podresources/v1")


def test_committed_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(ROOT / "scripts" / "gen-proto"), str(tmp_path)],
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    stale = [
        f"{package}/{stub}"
        for package in PACKAGES
        for stub in STUBS
        if (tmp_path / package / stub).read_bytes() != (ROOT / package / stub).read_bytes()
    ]
    assert not stale, f"stale gRPC stubs, run scripts/gen-proto: {stale}"


@pytest.mark.parametrize("package", PACKAGES)
def test_stubs_import_under_the_proto_package(package: str) -> None:
    module = package.replace("/", ".")
    __import__(f"{module}.api_pb2_grpc")
    assert f"{module}.api_pb2" in sys.modules
