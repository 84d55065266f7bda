"""``gpubus schema`` as a release manager and CI run it: the real CLI in a subprocess.

Cases: check passes on the committed docs/events; write into an empty folder makes exactly the
committed files; check on a stale copy names the stale file; check and publish against a baseline
that the code breaks name the break and exit 1 (publish writes nothing then); publish on a clean
folder records every message.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from shared.contract import contract

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "events"


def schema(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpubus", "schema", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)


def files_under(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_check_passes_on_the_committed_contract() -> None:
    done = schema("check", "--dir", str(DOCS))
    assert done.returncode == 0, done.stderr
    assert "current and compatible" in done.stdout


def test_write_makes_the_committed_files(tmp_path: Path) -> None:
    shutil.copy(DOCS / "published.json", tmp_path / "published.json")
    assert schema("write", "--dir", str(tmp_path)).returncode == 0
    assert files_under(tmp_path) == files_under(DOCS)


def test_check_names_a_stale_file(tmp_path: Path) -> None:
    shutil.copytree(DOCS, tmp_path / "events")
    (tmp_path / "events" / "schemas" / "device.health.v1.json").write_text("{}\n")
    done = schema("check", "--dir", str(tmp_path / "events"))
    assert done.returncode == 1
    assert "stale: " in done.stderr and "device.health.v1.json differs" in done.stderr


def test_check_and_publish_name_what_the_code_breaks(tmp_path: Path) -> None:
    folder = tmp_path / "events"
    shutil.copytree(DOCS, folder)
    published = json.loads((folder / "published.json").read_text())
    published["device.health.v1"]["schema"]["properties"]["xid"] = {"type": "integer"}
    (folder / "published.json").write_text(json.dumps(published))
    before = files_under(folder)
    for command in ("check", "publish"):
        done = schema(command, "--dir", str(folder))
        assert done.returncode == 1
        assert "break: device.health.v1: removed field xid: consumers that read it lose it" in done.stderr
    assert files_under(folder) == before


def test_publish_records_every_message(tmp_path: Path) -> None:
    done = schema("publish", "--dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "published.json").read_text()) == contract()
    assert schema("check", "--dir", str(tmp_path)).returncode == 0
